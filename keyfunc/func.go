package keyfunc

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultMaxKeyLen is the default bound on a key's length in bytes; MinKeyLen is the
// smallest bound WithMaxKeyLen accepts.
const (
	DefaultMaxKeyLen = 256
	MinKeyLen        = 32
)

// Func is a compiled key function: it derives one key per Source. Build it with Join or
// Template and refine it with Scope and With; those return new Funcs and never change the
// receiver, so a Func is safe for concurrent use.
type Func struct {
	scope []Part
	parts []Part
	lits  []string // lits[i] precedes parts[i]; lits[len(parts)] ends the key
	opts  options
}

type options struct {
	maxKeyLen  int
	maxPartLen int // 0: the parts' own defaults; <0: no cap
	hashAbove  int // 0: DefaultHashAbove; <0: always hash
}

// Option configures a Func; see Template and Func.With. A nil Option is skipped.
type Option func(*options)

// WithMaxKeyLen bounds the key to n bytes (default DefaultMaxKeyLen; values below MinKeyLen
// are raised to it). A longer key keeps its first n-23 bytes, followed by '#' and a 22-char
// hash of the whole key, so distinct keys stay distinct. Keep n within the lock layer's own
// bound: a key longer than that is refused there, not shortened.
func WithMaxKeyLen(n int) Option {
	return func(o *options) { o.maxKeyLen = max(n, MinKeyLen) }
}

// WithMaxPartLen sets the hard cap in bytes for every part without a MaxLen of its own,
// replacing the per-constructor defaults (DefaultMaxLen and friends); n <= 0 removes it.
// Const and BodyHash are never capped.
func WithMaxPartLen(n int) Option {
	return func(o *options) {
		o.maxPartLen = n
		if n <= 0 {
			o.maxPartLen = -1
		}
	}
}

// WithHashAbove sets the hash threshold for every part without a HashAbove of its own
// (default DefaultHashAbove); n <= 0 hashes every value.
func WithHashAbove(n int) Option {
	return func(o *options) {
		o.hashAbove = n
		if n <= 0 {
			o.hashAbove = -1
		}
	}
}

// Join builds a Func whose key is its parts joined by ':', e.g. Join(Meta(MetaRoute),
// IdempotencyKey()). It panics, at build time, if parts is empty or holds a zero Part.
func Join(parts ...Part) *Func {
	if len(parts) == 0 {
		panic("keyfunc: Join with no parts")
	}
	mustBeBuilt(parts)
	lits := make([]string, len(parts)+1)
	for i := 1; i < len(parts); i++ {
		lits[i] = ":"
	}
	return &Func{parts: clone(parts), lits: lits, opts: newOptions(nil)}
}

// With returns a copy of f with opts applied on top of f's options. It panics if f is nil.
func (f *Func) With(opts ...Option) *Func {
	mustFunc(f, "With")
	g := *f
	for _, o := range opts {
		if o != nil {
			o(&g.opts)
		}
	}
	return &g
}

// Scope returns a copy of f whose keys start with a scope segment: the scope parts joined by
// ':' and ended by '|', then f's key. Values never contain ':' or '|', so the segment ends
// at the first '|' and keys of one Func under different scope values never meet, whatever
// the unscoped parts hold. Calling Scope again puts the new parts first in the same
// segment. Scope parts follow the usual rules: required ones fail with ErrMissing, and an
// Optional one renders "~" (all requests without it then share that scope).
// It panics if f is nil or parts holds a zero Part.
func (f *Func) Scope(parts ...Part) *Func {
	mustFunc(f, "Scope")
	mustBeBuilt(parts)
	g := *f
	g.scope = append(clone(parts), f.scope...)
	return &g
}

// UsesIdempotencyKey reports whether any part of f, scope included, is IdempotencyKey or
// Header(IdempotencyKeyHeader). Middleware turns idempotent replay on by default when it is.
// A nil f has no parts: false.
func (f *Func) UsesIdempotencyKey() bool {
	if f == nil {
		return false
	}
	for _, ps := range [][]Part{f.scope, f.parts} {
		for _, p := range ps {
			if p.idem {
				return true
			}
		}
	}
	return false
}

// RequiredParams lists the path parameters that f's required Param parts read (scope first,
// in order). An adapter can check them against the route a request matched: a route that
// does not declare one can never give f a key, which is the server's mistake, not the
// client's. Optional parts and From functions are not listed. A nil f has no parts: nil.
func (f *Func) RequiredParams() []string {
	if f == nil {
		return nil
	}
	var names []string
	for _, ps := range [][]Part{f.scope, f.parts} {
		for _, p := range ps {
			if p.param != "" && !p.optional {
				names = append(names, p.param)
			}
		}
	}
	return names
}

// String describes f's shape, with part names in braces, e.g. "{route}|pay:{user}:{order}".
// It holds no request data, so it suits logs and low-cardinality span attributes. A nil or
// zero Func gives "".
func (f *Func) String() string {
	if f == nil || len(f.lits) == 0 {
		return ""
	}
	var b strings.Builder
	for i, p := range f.scope {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString("{" + p.name + "}")
	}
	if len(f.scope) > 0 {
		b.WriteByte('|')
	}
	for i, p := range f.parts {
		b.WriteString(f.lits[i] + "{" + p.name + "}")
	}
	b.WriteString(f.lits[len(f.parts)])
	return b.String()
}

// Key derives the key for src. The same input always gives the same key, at most the
// WithMaxKeyLen bound long, never containing '{', '}', whitespace or non-ASCII bytes.
// Errors are *PartError values wrapping ErrMissing, ErrInvalid, ErrTooLong,
// ErrMalformedBody, ErrUnsupportedType, ErrContextValue, the error of Source.Body
// (ErrBodyTooLarge) or of a From function; a nil Source, a nil *Func or a Func not built by
// Join or Template gives a plain error, which is the server's mistake (not an input error,
// see IsInputError).
func (f *Func) Key(src Source) (string, error) {
	switch {
	case f == nil:
		return "", errors.New("keyfunc: Key on a nil *Func; build it with Join or Template")
	case len(f.lits) == 0:
		return "", errors.New("keyfunc: zero Func; build it with Join or Template")
	case src == nil:
		return "", errors.New("keyfunc: nil Source")
	}
	e := &eval{src: src}
	buf := make([]byte, 0, 96)
	var err error
	for i, p := range f.scope {
		if i > 0 {
			buf = append(buf, ':')
		}
		if buf, err = f.render(buf, e, p); err != nil {
			return "", err
		}
	}
	if len(f.scope) > 0 {
		buf = append(buf, '|')
	}
	for i, p := range f.parts {
		buf = append(buf, f.lits[i]...)
		if buf, err = f.render(buf, e, p); err != nil {
			return "", err
		}
	}
	buf = append(buf, f.lits[len(f.parts)]...)
	if limit := f.opts.maxKeyLen; len(buf) > limit {
		full := string(buf)
		buf = appendHashed(buf[:limit-hashedLen], domainKey, full)
	}
	return string(buf), nil
}

// render appends p's value, the missing marker, or fails with a *PartError.
func (f *Func) render(dst []byte, e *eval, p Part) ([]byte, error) {
	v, ok, err := p.get(e)
	switch {
	case err != nil && p.optional && errors.As(err, new(*notJSONError)):
		return append(dst, missingMarker...), nil
	case err != nil:
		return dst, &PartError{Part: p.name, Err: err}
	case !ok && p.optional:
		return append(dst, missingMarker...), nil
	case !ok:
		return dst, &PartError{Part: p.name, Err: ErrMissing}
	}
	if limit := f.maxLen(p); limit > 0 && len(v) > limit {
		return dst, p.unusable(ErrTooLong, fmt.Sprintf("%d bytes, limit %d", len(v), limit))
	}
	if p.integer {
		var ok bool
		if v, ok = canonicalInteger(v); !ok {
			return dst, p.unusable(ErrInvalid, "not a base-10 integer")
		}
	}
	return appendValue(dst, v, f.hashAbove(p)), nil
}

// unusable is the error of a value p cannot use: kind (ErrTooLong, ErrInvalid) when the
// request or task gave the value, ErrContextValue when the server did. The client did not
// send a context value, so an adapter must not answer it with a 400 or archive the task.
func (p Part) unusable(kind error, detail string) *PartError {
	if p.server {
		kind = ErrContextValue
	}
	return &PartError{Part: p.name, Err: fmt.Errorf("%w: %s", kind, detail)}
}

func (f *Func) maxLen(p Part) int {
	switch {
	case p.maxLen != 0:
		return p.maxLen
	case p.defMax < 0:
		return -1
	case f.opts.maxPartLen != 0:
		return f.opts.maxPartLen
	}
	return p.defMax
}

func (f *Func) hashAbove(p Part) int {
	switch {
	case p.hashAbove != 0:
		return p.hashAbove
	case f.opts.hashAbove != 0:
		return f.opts.hashAbove
	}
	return DefaultHashAbove
}

func newOptions(opts []Option) options {
	o := options{maxKeyLen: DefaultMaxKeyLen}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// mustFunc panics when a builder method (method) is called on a nil *Func: there is no key
// function to copy, and a nil dereference deep inside would not say so.
func mustFunc(f *Func, method string) {
	if f == nil {
		panic("keyfunc: " + method + " on a nil *Func; build it with Join or Template")
	}
}

func mustBeBuilt(parts []Part) {
	for _, p := range parts {
		if p.get == nil {
			panic("keyfunc: zero Part; build parts with Param, JSON, Const, ...")
		}
	}
}

func clone(parts []Part) []Part { return append([]Part(nil), parts...) }
