package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Default hard caps on a raw value's length in bytes; a longer value fails with ErrTooLong.
// Part.MaxLen and WithMaxPartLen change them.
const (
	DefaultMaxLen       = 1024 // params, query values, metadata, context values, From (Const has none)
	DefaultMaxHeaderLen = 255  // headers and IdempotencyKey (Stripe's limit for keys)
	DefaultMaxBodyLen   = 4096 // JSON and form fields
)

// DefaultHashAbove is the escaped length in bytes above which a value is replaced by a
// 23-byte hash marker; see Part.HashAbove and WithHashAbove.
const DefaultHashAbove = 64

// IdempotencyKeyHeader is the header IdempotencyKey reads.
const IdempotencyKeyHeader = "Idempotency-Key"

// Part is one piece of a key. Parts are values: the modifier methods return a changed copy,
// so one Part may be shared by several key functions. Parts are required unless Optional.
// The zero Part is not usable; build parts with the constructors.
type Part struct {
	name      string
	named     bool
	get       getter
	optional  bool
	maxLen    int // 0: the Func's WithMaxPartLen or defMax; <0: no cap
	defMax    int // the constructor's default cap; <0: no cap
	hashAbove int // 0: the Func's WithHashAbove; <0: always hash
	idem      bool
	integer   bool    // Integer: the value is a base-10 integer, rendered canonically
	param     string  // the path parameter a Param part reads
	server    bool    // the server set the value (ContextValue): unusable is ErrContextValue
	constant  *string // Const's value, checked when the part is built
}

// getter returns a part's raw value and whether it is present.
type getter func(*eval) (string, bool, error)

func newPart(name string, defMax int, get getter) Part {
	return Part{name: name, defMax: defMax, get: get}
}

// Optional returns p made optional: when its value is absent the key holds the marker "~",
// which no present value (not even "") renders as. For an optional JSON part a body that is
// not JSON and does not start like an object or array (a form, say, on a route that takes
// either) counts as absent. A body that starts like one and does not parse stays an error
// (ErrMalformedBody): a handler's more lenient decoder could still find the value in it, and
// the key must not fall back to "~" for it. Other errors (ErrTooLong, ErrInvalid, body too
// large) stay too.
func (p Part) Optional() Part { p.optional = true; return p }

// Named returns p with the name used in errors and in Func.String. An empty name is ignored.
// Inside Template a part not Named takes its placeholder's name.
func (p Part) Named(name string) Part {
	if name != "" {
		p.name, p.named = name, true
	}
	return p
}

// MaxLen returns p with a hard cap of n bytes on its raw value; a longer value fails with
// ErrTooLong. n <= 0 removes the cap (the rendered value stays bounded by hashing).
func (p Part) MaxLen(n int) Part {
	p.maxLen = n
	if n <= 0 {
		p.maxLen = -1
	}
	return p
}

// Integer returns p with its value read as a base-10 integer, the way strconv.ParseInt,
// strconv.Atoi and Gin's binding read one into an int field: an optional sign, then digits.
// The key holds the integer in canonical form (no '+', no leading zeros, "-0" as "0"), so
// "/accounts/042", "/accounts/+42" and "/accounts/42" share a lock, as they share the account
// a handler parses from them. Without Integer a part's text is compared byte for byte, and
// those three are three locks. A JSON string holding an integer ("042", which a ",string"
// struct tag decodes to 42) and a JSON number with an integer value (42, 42.0, 4.2e1) count
// the same. Any other value fails with ErrInvalid, the empty one too (Gin's form binding
// reads "" as 0; the request is refused rather than locked as account 0), and so does one
// with spaces around it, which Gin's form, query and URI binding trim first (" 42" binds as
// 42): such a request is refused, never locked apart from "42".
//
// Text integers of any size are taken; the part's cap applies to the text as sent, before it
// is made canonical. A JSON number is taken up to 64 digits (1e63) and is ErrInvalid above:
// its canonical form writes a larger number with an exponent rather than spell out the
// digits that a few bytes of body can ask for (1e999999999).
//
// Use it where the handler converts the value to a number; leave it off where the value is
// an identifier kept as text ("042" and "42" are then two accounts, and must be two locks).
//
// On a Const part whose value is not an integer it panics: the server wrote it, and every
// key would otherwise fail as if the request were at fault.
func (p Part) Integer() Part {
	if p.constant != nil {
		if _, ok := canonicalInteger(*p.constant); !ok {
			panic(fmt.Sprintf("keyfunc: Const(%q).Integer(): the constant is not an integer", *p.constant))
		}
	}
	p.integer = true
	return p
}

// canonicalInteger is v, a base-10 integer, in canonical form; false when v is not one.
func canonicalInteger(v string) (string, bool) {
	digits, neg := strings.CutPrefix(v, "-")
	if !neg {
		digits = strings.TrimPrefix(digits, "+")
	}
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return "", false
	}
	digits = strings.TrimLeft(digits, "0")
	switch {
	case digits == "":
		return "0", true
	case neg:
		return "-" + digits, true
	}
	return digits, true
}

// HashAbove returns p with its values hashed when their escaped form is longer than n bytes
// (default DefaultHashAbove). n <= 0 hashes every value, to keep raw user data out of keys.
func (p Part) HashAbove(n int) Part {
	p.hashAbove = n
	if n <= 0 {
		p.hashAbove = -1
	}
	return p
}

// String returns the part's name, as errors report it.
func (p Part) String() string { return p.name }

// Param is the path parameter name (KindParam). Cap: DefaultMaxLen.
func Param(name string) Part {
	p := valuePart("Param", KindParam, name, DefaultMaxLen)
	p.param = name
	return p
}

// Query is the first value of query parameter name (KindQuery). Cap: DefaultMaxLen.
func Query(name string) Part {
	return valuePart("Query", KindQuery, name, DefaultMaxLen)
}

// Header is the first value of header name (KindHeader), as sent. Cap: DefaultMaxHeaderLen.
// Header(IdempotencyKeyHeader) counts for UsesIdempotencyKey but, unlike IdempotencyKey,
// takes the value as sent, without sf-string decoding or validation. A name that is not a
// header field name (RFC 9110: a token, such as "X-Account") panics: no request carries it.
func Header(name string) Part {
	if strings.IndexFunc(name, notTokenChar) >= 0 {
		panic(fmt.Sprintf("keyfunc: Header(%q): not a header field name (RFC 9110 token)", name))
	}
	p := valuePart("Header", KindHeader, name, DefaultMaxHeaderLen)
	p.idem = strings.EqualFold(name, IdempotencyKeyHeader)
	return p
}

// Meta is adapter metadata such as MetaRoute or MetaTaskType (KindMeta). Cap: DefaultMaxLen.
func Meta(name string) Part {
	return valuePart("Meta", KindMeta, name, DefaultMaxLen)
}

// mustName panics when a part constructor is given an empty name: the part would be absent
// from every request, each refused as if the client had left it out.
func mustName(constructor, name string) {
	if name == "" {
		panic("keyfunc: " + constructor + " with an empty name")
	}
}

// notTokenChar reports whether r may not appear in an RFC 9110 token (a header field name).
func notTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// valuePart is a part of the value name of kind, built by constructor (named in its panic).
func valuePart(constructor string, kind Kind, name string, defMax int) Part {
	mustName(constructor, name)
	return newPart(name, defMax, func(e *eval) (string, bool, error) {
		v, ok := e.src.Value(kind, name)
		return v, ok, nil
	})
}

// IdempotencyKey is the Idempotency-Key header, accepted as an RFC 8941 sf-string ("abc")
// or bare (abc). The key must be 1..255 printable ASCII characters, counted without the
// quotes (cap: DefaultMaxHeaderLen, see MaxLen); otherwise ErrInvalid or ErrTooLong. A bare key with a comma is two keys (a
// list, or repeated header lines a proxy combined): ErrInvalid; quote a key that holds one.
// A Source that also implements MultiValueSource (ginlock's does) shows every header line: a
// key on more than one line is ErrInvalid, whatever the lines hold. A header
// sent empty (or only spaces and tabs), as clients do when the variable that should fill it
// is unset, counts as absent: ErrMissing, or "~" when Optional. Keys using it report
// UsesIdempotencyKey.
func IdempotencyKey() Part {
	p := newPart(IdempotencyKeyHeader, DefaultMaxHeaderLen, func(e *eval) (string, bool, error) {
		v, ok := e.src.Value(KindHeader, IdempotencyKeyHeader)
		if vs, multi := e.src.(MultiValueSource); multi && ok {
			if all := vs.Values(KindHeader, IdempotencyKeyHeader); len(all) > 1 {
				if !slices.ContainsFunc(all, notBlank) {
					return "", false, nil // every line sent empty: absent, as one empty line is
				}
				// A key sent twice, or a key beside an empty line. Not joined and parsed as
				// RFC 9110 combines lines: `"a` and `b"` would make the one key "a, b".
				return "", true, fmt.Errorf("%w: Idempotency-Key holds more than one key (sent on %d header lines)", ErrInvalid, len(all))
			}
		}
		if !ok || !notBlank(v) {
			return "", false, nil
		}
		k, err := parseIdempotencyKey(v)
		return k, true, err
	})
	p.idem = true
	return p
}

// notBlank reports whether a header value holds more than spaces and tabs.
func notBlank(v string) bool { return strings.Trim(v, " \t") != "" }

// JSON is the body field at a dot path: "order.id", "items.0.sku" (a numeric segment
// indexes an array, and names an object member otherwise). Strings are used as is, numbers
// in a canonical decimal form (1e2, 100 and 100.0 all give "100", exactly; -0 gives "0"),
// booleans as "true"/"false" (so "100" and 100 give the same value); null counts as absent;
// objects and arrays are used in their canonical JSON form (sorted keys, compact), which a
// string holding the same text also gives; the path "" is the whole body, and an empty
// segment names the member "" ("." is {"":{"":…}}'s inner value). Member names match
// ignoring case, as encoding/json matches them to struct fields. The body is parsed once per
// Key call, however many parts use it.
// Errors: ErrMalformedBody (invalid JSON, nesting deeper than MaxJSONDepth), ErrInvalid
// (in the value, a nonzero number of magnitude below 1e-999999999 or from 1e1000000000 up,
// however it is written; two members whose names differ only in case match one segment; a
// member repeated, or a string escaping an unpaired UTF-16 surrogate, which encoding/json
// reads as U+FFFD, anywhere in the body). Cap: DefaultMaxBodyLen.
func JSON(path string) Part {
	segs := splitPath(path)
	return newPart(path, DefaultMaxBodyLen, func(e *eval) (string, bool, error) {
		root, err := e.parsedJSON()
		if err != nil {
			return "", false, err
		}
		v, ok, err := lookupPath(root, segs)
		if err != nil || !ok || v == nil {
			return "", false, err
		}
		s, err := jsonText(v)
		return s, true, err
	})
}

// Form is a form field as a handler reads it, from the body or from the query: whichever
// has it, and ErrInvalid when both have it with different values, since handlers differ in
// which they read first (net/http's FormValue takes the query first for multipart bodies and
// the body first for urlencoded ones; Gin's c.PostForm reads the body only).
//
// The body's value is the adapter's own (KindForm) when it serves one; otherwise the field
// parsed from the body as application/x-www-form-urlencoded (first value), as ParseForm
// parses it: only when the source names that Content-Type (KindHeader; also with a parameter
// that does not parse, as ParseForm reads those) and no method (KindMeta MetaMethod) or
// POST, PUT or PATCH; a source that names neither a Content-Type nor a method (one without
// HTTP headers, such as a map) has its body read too. A JSON, text/plain or untyped HTTP
// body is not read as a form, so a client cannot lock one account with a body the handler
// never reads.
// Pairs that do not parse (a bad escape, a ';') are skipped, as ParseForm skips them for
// the handler. A multipart/form-data body is read by the adapter when it serves the field
// through KindForm; otherwise keyfunc reads it as ParseMultipartForm does: the first part
// named name that is not a file. Such a body that does not parse is ErrMalformedBody (the
// handler's ParseMultipartForm fails on it too), and one over the cap or cut short fails the
// part with the adapter's error.
// Cap: DefaultMaxBodyLen.
func Form(name string) Part {
	mustName("Form", name)
	return newPart(name, DefaultMaxBodyLen, func(e *eval) (string, bool, error) {
		body, inBody, err := formBodyValue(e, name)
		if err != nil {
			return "", false, err
		}
		query, inQuery := e.src.Value(KindQuery, name)
		switch {
		case inBody && inQuery && body != query:
			return "", false, fmt.Errorf("%w: form field in both the query and the body, with different values", ErrInvalid)
		case inBody:
			return body, true, nil
		}
		return query, inQuery, nil
	})
}

// formBodyValue is the first value of form field name in the body; see Form.
func formBodyValue(e *eval, name string) (string, bool, error) {
	if v, ok := e.src.Value(KindForm, name); ok {
		return v, true, nil
	}
	method, isHTTP := e.src.Value(KindMeta, MetaMethod)
	if isHTTP && method != "POST" && method != "PUT" && method != "PATCH" {
		return "", false, nil
	}
	if ct, ok := e.src.Value(KindHeader, "Content-Type"); ok {
		// The media type as ParseForm takes it: also when a parameter does not parse
		// (ErrInvalidMediaParameter), where ParseForm still reads the body.
		mt, params, _ := mime.ParseMediaType(ct)
		if mt == "multipart/form-data" {
			// Not served by the adapter (KindForm above): read as ParseMultipartForm reads
			// it for c.PostForm. A body it could not read, over the cap or cut short, fails
			// the part rather than leave the field missing.
			body, err := e.readBody()
			if err != nil {
				return "", false, err
			}
			return multipartValue(body, params["boundary"], name)
		}
		if mt != "application/x-www-form-urlencoded" {
			return "", false, nil
		}
	} else if isHTTP {
		return "", false, nil // an HTTP request without a Content-Type: ParseForm leaves the body
	}
	form, err := e.parsedForm()
	if err != nil {
		return "", false, err
	}
	if vs := form[name]; len(vs) > 0 {
		return vs[0], true, nil
	}
	return "", false, nil
}

// ContextValue is the value stored in the Source's context under key, typically the user or
// tenant id put there by auth middleware. Accepted: string, fmt.Stringer and integer types
// (and types based on them; a Stringer is read through String, also when it is a string or
// an integer, so a String that redacts puts every caller in one scope); anything else is ErrUnsupportedType, a server-side mistake that
// IsInputError does not count as the request's. A value over the cap (or not an integer for
// an Integer part) is the server's too: ErrContextValue, not ErrTooLong or ErrInvalid, which
// would blame the request. nil is absent, and so is text that is empty or only spaces and
// tabs (an auth step that stored "" for a request without a user): a required user part then
// fails with ErrMissing, rather than putting every anonymous caller in one shared scope.
// Cap: DefaultMaxLen.
// Panics if key is nil or not comparable (a slice, a map: context.WithValue refuses such
// keys, so no value could ever be found). Name it with Named("user") for readable errors.
func ContextValue(key any) Part {
	if key == nil {
		panic("keyfunc: ContextValue with nil key")
	}
	if !reflect.TypeOf(key).Comparable() {
		panic(fmt.Sprintf("keyfunc: ContextValue with a key of type %T, which is not comparable", key))
	}
	name := fmt.Sprintf("context %T", key)
	switch k := key.(type) {
	case string:
		name = k
	case fmt.Stringer:
		name = k.String()
	}
	p := newPart(name, DefaultMaxLen, func(e *eval) (string, bool, error) {
		ctx := e.src.Context()
		if ctx == nil {
			return "", false, nil
		}
		return contextText(ctx, key)
	})
	p.server = true
	return p
}

func contextText(ctx context.Context, key any) (string, bool, error) {
	v, ok, err := contextValueText(ctx, key)
	if ok && err == nil && strings.Trim(v, " \t") == "" {
		return "", false, nil
	}
	return v, ok, err
}

func contextValueText(ctx context.Context, key any) (string, bool, error) {
	v := ctx.Value(key)
	if v == nil {
		return "", false, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan:
		if rv.IsNil() { // a nil of a type with methods (a Stringer) would panic when called
			return "", false, nil
		}
	}
	switch x := v.(type) {
	case string:
		return x, true, nil
	case fmt.Stringer:
		return x.String(), true, nil
	}
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), true, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), true, nil
	}
	return "", true, fmt.Errorf("%w: %T", ErrUnsupportedType, v)
}

// From is a part computed by fn, for data no other constructor reaches. fn reports an
// absent value by returning an error wrapping ErrMissing; any other error fails the key.
// Cap: DefaultMaxLen. Panics if fn is nil.
func From(name string, fn func(Source) (string, error)) Part {
	if fn == nil {
		panic("keyfunc: From with nil function")
	}
	return newPart(name, DefaultMaxLen, func(e *eval) (string, bool, error) {
		v, err := fn(e.src)
		if errors.Is(err, ErrMissing) {
			return "", false, nil
		}
		return v, err == nil, err
	})
}

// Const is a fixed value, escaped like any other (use Template for literal text such as
// a "pay:" prefix). It has no length cap but is hashed when long.
func Const(s string) Part {
	p := newPart("const", -1, func(*eval) (string, bool, error) { return s, true, nil })
	p.constant = &s
	return p
}

// BodyHash is a SHA-256 of the canonical body, 43 base64url characters. Use it to catch the
// same payload submitted twice without a client key. The body is hashed
//   - as JSON re-encoded with sorted keys and canonical numbers when it is valid JSON that
//     JSON parts accept (within MaxJSONDepth, no repeated member, no two members whose names
//     differ only in case, no unpaired surrogate escape, no number out of range);
//   - as a multipart/form-data body (as the Content-Type header names it) by its parts,
//     without the boundary a client picks anew each time it encodes the form, but in the
//     order sent: a client that sends the same form again sends its fields in the same order,
//     and a handler reading the parts as a stream sees that order;
//   - as raw bytes otherwise, a urlencoded form included. A body JSON parts refuse is hashed
//     raw rather than refused: its bytes hold all it says, so no two payloads share a hash,
//     though two spellings of one payload may differ.
//
// Errors only when the body cannot be read.
func BodyHash() Part {
	return newPart("body", -1, func(e *eval) (string, bool, error) {
		return e.bodyHash()
	})
}
