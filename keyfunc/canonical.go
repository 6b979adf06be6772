package keyfunc

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// maxDecimalExponent bounds a JSON number by its value, not its spelling: a nonzero number
// x = m·10^k (1 <= |m| < 10) is accepted when |k| <= maxDecimalExponent, that is when
// 1e-999999999 <= |x| < 1e1000000000, so that 0.1e1000000000 and 1e999999999 are both
// accepted and 10e999999999 and 1e1000000000 both refused. Zero is always accepted.
const maxDecimalExponent = 999_999_999

// errNumberRange refuses a number out of that range; it names no number, so every spelling
// of one gets the same error.
var errNumberRange = fmt.Errorf("%w: number out of range (a nonzero magnitude must be at least 1e-999999999 and below 1e1000000000)", ErrInvalid)

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
		// Room for the members of a typical object on the stack (recursion is at most
		// MaxJSONDepth deep); a larger object grows keys on the heap.
		var room [16]string
		keys := room[:0]
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
	// A few keys are compared pairwise, without allocating; foldKey(a) == foldKey(b) exactly
	// when strings.EqualFold(a, b), so both ways give one answer.
	if len(keys) <= 16 {
		for i, a := range keys {
			for _, b := range keys[i+1:] {
				if strings.EqualFold(a, b) {
					return true
				}
			}
		}
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

// appendJSONString appends s as json.Marshal writes it; the canonical body is hashed, so that
// text, HTML-safe escapes included, must not change. Printable ASCII that json.Marshal leaves
// as it is, the common case, is appended directly.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// canonicalNumber rewrites a JSON number literal so that equal values give equal text:
// the value sign·D·10^E (D without leading or trailing zeros) is written as a plain
// integer ("100") or decimal ("0.005") when that takes at most 64 digits, and as D"e"E
// ("15e-100") otherwise; zero is "0". The three shapes are told apart by '.' and 'e', so
// different values never share a text. A value out of the range maxDecimalExponent allows
// fails with ErrInvalid, with one message whatever the number and its spelling.
func canonicalNumber(lit string) (string, error) {
	s, neg := strings.CutPrefix(lit, "-")
	if plainInteger(s) { // the common case, already canonical: no trailing zeros to count
		if s == "0" {
			return s, nil
		}
		return lit, nil
	}
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	d := strings.TrimLeft(intPart+frac, "0")
	if d == "" {
		return "0", nil // zero, whatever its exponent
	}
	var litExp int64
	if hasExp {
		var err error
		// Past int64, ParseInt gives its bound and ErrRange: refused below, as no mantissa
		// held in memory has the digits to bring such a number back into range.
		if litExp, err = strconv.ParseInt(expPart, 10, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			return "", fmt.Errorf("%w: number with a malformed exponent", ErrInvalid)
		}
	}
	// The mantissa moves the exponent by less than len(lit): a written exponent past that
	// margin is out of range, and within it the sum below cannot overflow.
	if margin := maxDecimalExponent + int64(len(lit)); litExp < -margin || litExp > margin {
		return "", errNumberRange
	}
	// lead is k, the exponent of d's first digit; it and not the written exponent is bounded.
	lead := litExp - int64(len(frac)) + int64(len(d)) - 1
	if lead < -maxDecimalExponent || lead > maxDecimalExponent {
		return "", errNumberRange
	}
	d = strings.TrimRight(d, "0")
	exp := lead - int64(len(d)) + 1 // E, the exponent of D's last digit

	var out string
	const plainDigits = 64
	switch {
	case exp >= 0 && int64(len(d))+exp <= plainDigits:
		out = d + strings.Repeat("0", int(exp))
	case exp < 0 && -exp <= plainDigits:
		if point := len(d) + int(exp); point > 0 {
			out = d[:point] + "." + d[point:]
		} else {
			out = "0." + strings.Repeat("0", -point) + d
		}
	default:
		out = d + "e" + strconv.FormatInt(exp, 10)
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}

// plainInteger reports whether s is digits as canonicalNumber writes an integer: without a
// leading zero (bar "0" itself), and at most 64 of them.
func plainInteger(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '0' && len(s) > 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
