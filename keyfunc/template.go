package keyfunc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Template builds a Func from a template such as "pay:{user}:{order}", where each
// {placeholder} names an entry of parts (names: letters, digits, '_', '.', '-'). A part not
// Named takes its placeholder's name. Literal text may hold printable ASCII except
// '{', '}', '%', '#' (it starts the hash that ends a key over its bound, which a literal must
// not be able to imitate) and space; two placeholders must be separated by literal text
// holding at least one byte that never occurs in a rendered value, i.e. anything but letters,
// digits, '-', '.', '_' and '~' (':' and '/' are typical), so neighbouring values cannot run
// into each other. A placeholder may repeat. Errors (wrapping ErrTemplate): an empty
// template, bad literal text, an unclosed or empty placeholder, a placeholder without a
// part, a part without a placeholder, a zero Part, neighbouring placeholders.
func Template(tmpl string, parts map[string]Part, opts ...Option) (*Func, error) {
	fail := func(format string, args ...any) (*Func, error) {
		return nil, fmt.Errorf("%w %q: %s", ErrTemplate, tmpl, fmt.Sprintf(format, args...))
	}
	if tmpl == "" {
		return fail("empty template")
	}
	f := &Func{opts: newOptions(opts)}
	used := make(map[string]bool, len(parts))
	var lit strings.Builder
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch {
		case c == '{':
			end := strings.IndexByte(tmpl[i:], '}')
			if end < 0 {
				return fail("unclosed placeholder at byte %d", i)
			}
			name := tmpl[i+1 : i+end]
			if !validPlaceholder(name) {
				return fail("bad placeholder name %q", name)
			}
			p, ok := parts[name]
			if !ok {
				return fail("placeholder {%s} has no part", name)
			}
			if p.get == nil {
				return fail("part %q is a zero Part", name)
			}
			if len(f.parts) > 0 && !separates(lit.String()) {
				return fail("placeholder {%s} needs a separator such as ':' before it", name)
			}
			if !p.named {
				p.name = name
			}
			used[name] = true
			f.lits = append(f.lits, lit.String())
			f.parts = append(f.parts, p)
			lit.Reset()
			i += end
		case c == '}':
			return fail("'}' outside a placeholder at byte %d", i)
		case c == '%' || c == '#' || c <= ' ' || c > '~':
			return fail("literal byte %q at byte %d is not allowed", c, i)
		default:
			lit.WriteByte(c)
		}
	}
	f.lits = append(f.lits, lit.String())
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		if !used[name] {
			return fail("part %q has no placeholder", name)
		}
	}
	return f, nil
}

// MustTemplate is Template that panics on error, for package-level key functions.
func MustTemplate(tmpl string, parts map[string]Part, opts ...Option) *Func {
	f, err := Template(tmpl, parts, opts...)
	if err != nil {
		panic(err)
	}
	return f
}

func validPlaceholder(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !safeByte(name[i]) {
			return false
		}
	}
	return true
}

// separates reports whether lit holds a byte no rendered value can hold.
func separates(lit string) bool {
	for i := 0; i < len(lit); i++ {
		if !renderedByte(lit[i]) {
			return true
		}
	}
	return false
}
