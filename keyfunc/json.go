package keyfunc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxJSONDepth is the deepest nesting of objects and arrays a body may have for JSON parts;
// deeper bodies fail with ErrMalformedBody before any decoding (BodyHash then hashes the
// raw bytes). It keeps decoding and canonical re-encoding cheap and their recursion shallow.
const MaxJSONDepth = 64

// maxExponentDigits bounds a JSON number's exponent so canonical forms stay computable.
const maxExponentDigits = 9

// parseJSON decodes one JSON value with exact numbers (json.Number), after checking depth.
// An object with a member name twice is refused with ErrInvalid: encoding/json gives a
// handler the last scalar, but merges repeated objects into a struct field and replaces them
// in a map, so no key could be sure to name what the handler acts on.
func parseJSON(body []byte) (any, error) {
	// encoding/json turns invalid UTF-8 into U+FFFD, which would give "\xff" and "\xfe" one
	// key; such a body is not JSON (RFC 8259 requires UTF-8), so it is refused.
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrMalformedBody)
	}
	if err := checkDepth(body, MaxJSONDepth); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		// The decoder's message quotes the offending byte: only its offset is told.
		var (
			syntax *json.SyntaxError
			dup    *repeatedMemberError
		)
		switch {
		case errors.As(err, &dup):
			return nil, err
		case errors.As(err, &syntax):
			return nil, fmt.Errorf("%w: invalid JSON at byte %d", ErrMalformedBody, syntax.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: JSON cut short", ErrMalformedBody)
		}
		return nil, fmt.Errorf("%w: invalid JSON", ErrMalformedBody)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrMalformedBody)
	}
	return v, nil
}

// repeatedMemberError is an object with a member name twice; it matches ErrInvalid.
type repeatedMemberError struct{ offset int64 }

func (e *repeatedMemberError) Error() string {
	return fmt.Sprintf("keyfunc: invalid value: object member repeated at byte %d", e.offset)
}

func (e *repeatedMemberError) Is(target error) bool { return target == ErrInvalid }

// decodeValue reads the next JSON value token by token into the types json.Decoder.Decode
// gives an any (with UseNumber), refusing repeated object members.
func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := name.(string) // the decoder only gives strings as member names
			if _, dup := obj[k]; dup {
				return nil, &repeatedMemberError{offset: dec.InputOffset()}
			}
			if obj[k], err = decodeValue(dec); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // '}'
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			el, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, el)
		}
		_, err := dec.Token() // ']'
		return arr, err
	}
	return tok, nil // string, json.Number, bool or nil
}

// checkDepth scans body for object/array nesting deeper than limit, skipping strings.
// It does not validate; the decoder does that.
func checkDepth(body []byte, limit int) error {
	depth, inString, escaped := 0, false, false
	for _, b := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			if depth > limit {
				return fmt.Errorf("%w: JSON nested deeper than %d", ErrMalformedBody, limit)
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return nil
}

// splitPath splits a dot path; "" is the path to the whole body.
func splitPath(path string) []string {
	if path == "" {
		return nil
	}
	return strings.Split(path, ".")
}

// lookupPath follows segs from v. A segment indexes an array when it is a canonical
// non-negative integer ("0", "12", not "01" or "+1"), and names an object member otherwise.
// Members are matched as encoding/json matches them to a handler's struct fields: by name,
// ignoring case (bytes.EqualFold). An object with two members that match one segment, such
// as "order_id" and "ORDER_ID", is refused with ErrInvalid: a struct would take the last of
// them and a map the exact one, so no key could be sure to name what the handler acts on.
func lookupPath(v any, segs []string) (any, bool, error) {
	for _, seg := range segs {
		switch node := v.(type) {
		case map[string]any:
			var next any
			n := 0
			for k, val := range node {
				if strings.EqualFold(k, seg) {
					next = val
					n++
				}
			}
			switch {
			case n == 0:
				return nil, false, nil
			case n > 1:
				return nil, false, fmt.Errorf("%w: %d object members match %q when case is ignored", ErrInvalid, n, seg)
			}
			v = next
		case []any:
			i, ok := arrayIndex(seg)
			if !ok || i >= len(node) {
				return nil, false, nil
			}
			v = node[i]
		default:
			return nil, false, nil
		}
	}
	return v, true, nil
}

func arrayIndex(seg string) (int, bool) {
	if seg == "" || len(seg) > 1 && seg[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(seg)
	return i, err == nil
}

// jsonText renders a decoded JSON value as a key value.
func jsonText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return canonicalNumber(string(x))
	case bool:
		return strconv.FormatBool(x), nil
	}
	b, err := appendCanonical(nil, v)
	return string(b), err
}

// appendCanonical appends v as compact JSON with object members sorted by key and numbers
// in canonical form. Recursion depth is bounded by MaxJSONDepth (checked on parse).
func appendCanonical(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case string:
		return appendJSONString(dst, x), nil
	case json.Number:
		n, err := canonicalNumber(string(x))
		return append(dst, n...), err
	case []any:
		dst = append(dst, '[')
		for i, el := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonical(dst, el); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		dst = append(dst, '{')
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Members whose names differ only in case fill one struct field, the last one in the
		// body winning: sorting them would hide which one that is.
		if foldDuplicate(keys) {
			return dst, fmt.Errorf("%w: object members whose names differ only in case", ErrInvalid)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendJSONString(dst, k), ':')
			var err error
			if dst, err = appendCanonical(dst, x[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("%w: unexpected JSON value %T", ErrInvalid, v)
}

// foldDuplicate reports whether two of keys are equal when case is ignored (strings.EqualFold).
func foldDuplicate(keys []string) bool {
	if len(keys) < 2 {
		return false
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		f := foldKey(k)
		if seen[f] {
			return true
		}
		seen[f] = true
	}
	return false
}

// foldKey maps each rune of s to the least rune of its simple case folding orbit, so that
// foldKey(a) == foldKey(b) exactly when strings.EqualFold(a, b).
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// canonicalNumber rewrites a JSON number literal so that equal values give equal text:
// the value sign·D·10^E (D without leading or trailing zeros) is written as a plain
// integer ("100") or decimal ("0.005") when that takes at most 64 digits, and as D"e"E
// ("15e-100") otherwise; zero is "0". The three shapes are told apart by '.' and 'e', so
// different values never share a text.
func canonicalNumber(lit string) (string, error) {
	s, neg := strings.CutPrefix(lit, "-")
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	exp := 0
	if hasExp {
		expNeg := strings.HasPrefix(expPart, "-")
		digits := strings.TrimLeft(strings.TrimLeft(expPart, "+-"), "0")
		if len(digits) > maxExponentDigits {
			return "", fmt.Errorf("%w: number with an exponent out of range", ErrInvalid)
		}
		if digits != "" {
			n, err := strconv.Atoi(digits)
			if err != nil {
				return "", fmt.Errorf("%w: number with a malformed exponent", ErrInvalid)
			}
			exp = n
		}
		if expNeg {
			exp = -exp
		}
	}
	d := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	if d == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(d, "0")
	exp += len(d) - len(trimmed)
	d = trimmed

	var out string
	const plainDigits = 64
	switch {
	case exp >= 0 && len(d)+exp <= plainDigits:
		out = d + strings.Repeat("0", exp)
	case exp < 0 && -exp <= plainDigits:
		if point := len(d) + exp; point > 0 {
			out = d[:point] + "." + d[point:]
		} else {
			out = "0." + strings.Repeat("0", -point) + d
		}
	default:
		out = d + "e" + strconv.Itoa(exp)
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}
