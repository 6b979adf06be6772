package keyfunc

import (
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// walkJSON builds the tree decodeJSON builds, with the same refusals (repeated members, lone
// surrogates, reported at the same offsets), from a body that json.Valid accepted and
// checkDepth passed. Validity settled, it needs no error paths of its own, and it spares the
// json.Decoder's copy of the body and its per-token allocations: member names and strings
// without escapes are slices of one copy of the body.
func walkJSON(body []byte) (any, error) {
	w := jsonWalker{s: string(body)}
	return w.value()
}

// jsonWalker reads valid JSON text s from offset i.
type jsonWalker struct {
	s string
	i int
}

func (w *jsonWalker) skipSpace() {
	for w.i < len(w.s) {
		switch w.s[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value reads the next value, as jsonDecoder.value gives it: map[string]any, []any, string,
// json.Number, bool or nil.
func (w *jsonWalker) value() (any, error) {
	w.skipSpace()
	switch w.s[w.i] {
	case '{':
		return w.object()
	case '[':
		return w.array()
	case '"':
		s, err := w.str()
		if err != nil {
			return nil, err
		}
		return s, nil
	case 't':
		w.i += len("true")
		return true, nil
	case 'f':
		w.i += len("false")
		return false, nil
	case 'n':
		w.i += len("null")
		return nil, nil
	}
	start := w.i
	for w.i < len(w.s) && strings.IndexByte("+-.0123456789eE", w.s[w.i]) >= 0 {
		w.i++
	}
	return json.Number(w.s[start:w.i]), nil
}

func (w *jsonWalker) object() (any, error) {
	w.i++ // '{'
	obj := map[string]any{}
	for {
		w.skipSpace()
		if w.s[w.i] == '}' {
			w.i++
			return obj, nil
		}
		if w.s[w.i] == ',' {
			w.i++
			w.skipSpace()
		}
		k, err := w.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[k]; dup {
			return nil, &repeatedMemberError{offset: int64(w.i)} // the name's end, as the decoder tells it
		}
		w.skipSpace()
		w.i++ // ':'
		if obj[k], err = w.value(); err != nil {
			return nil, err
		}
	}
}

func (w *jsonWalker) array() (any, error) {
	w.i++ // '['
	arr := []any{}
	for {
		w.skipSpace()
		switch w.s[w.i] {
		case ']':
			w.i++
			return arr, nil
		case ',':
			w.i++
		}
		el, err := w.value()
		if err != nil {
			return nil, err
		}
		arr = append(arr, el)
	}
}

// str reads a string literal as encoding/json unquotes it, refusing a lone surrogate escape
// (loneSurrogateError at the escape's offset) where encoding/json would write U+FFFD.
func (w *jsonWalker) str() (string, error) {
	start := w.i + 1 // after '"'
	end := start
	for w.s[end] != '"' && w.s[end] != '\\' {
		end++
	}
	if w.s[end] == '"' { // no escapes: the text as it stands
		w.i = end + 1
		return w.s[start:end], nil
	}
	b := make([]byte, 0, len(w.s[start:end])+16)
	b = append(b, w.s[start:end]...)
	i := end
	for w.s[i] != '"' {
		c := w.s[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch e := w.s[i+1]; e {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hex4(w.s[i+2 : i+6])
			if utf16.IsSurrogate(r) {
				low, ok := surrogatePair(w.s, i, r)
				if !ok {
					return "", &loneSurrogateError{offset: int64(i)}
				}
				r = utf16.DecodeRune(r, low)
				i += 6
			}
			b = utf8.AppendRune(b, r)
			i += 6
			continue
		default: // '"', '\\', '/'
			b = append(b, e)
		}
		i += 2
	}
	w.i = i + 1
	return string(b), nil
}
