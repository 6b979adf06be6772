package keyfunc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJSONDepth is the deepest nesting of objects and arrays a body may have for JSON parts;
// deeper bodies fail with ErrMalformedBody before any decoding (BodyHash then hashes the
// raw bytes). It keeps decoding and canonical re-encoding cheap and their recursion shallow.
const MaxJSONDepth = 64

// parseJSON decodes one JSON value with exact numbers (json.Number), after checking depth.
// An object with a member name twice is refused with ErrInvalid: encoding/json gives a
// handler the last scalar, but merges repeated objects into a struct field and replaces them
// in a map, so no key could be sure to name what the handler acts on. So is a string (value
// or member name) holding an unpaired UTF-16 surrogate escape, see loneSurrogateError.
func parseJSON(body []byte) (any, error) {
	// encoding/json turns invalid UTF-8 into U+FFFD, which would give "\xff" and "\xfe" one
	// key; such a body is not JSON (RFC 8259 requires UTF-8), so it is refused.
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrMalformedBody)
	}
	if err := checkDepth(body, MaxJSONDepth); err != nil {
		return nil, err
	}
	// encoding/json's own scanner decides what is JSON, without allocating; a valid body is
	// built by walkJSON, and the decoder, which knows where a body goes wrong, explains the rest.
	if json.Valid(body) {
		return walkJSON(body)
	}
	return decodeJSON(body)
}

// decodeJSON is parseJSON through a json.Decoder, after the UTF-8 and depth checks: the tree
// walkJSON gives for a valid body, and for any other the error that tells what is wrong and
// at which byte. A repeated member or a lone surrogate is reported only when the rest of the
// body parses: a body that is not JSON at all ('"\ud800" is not JSON', a form) stays
// ErrMalformedBody, which an optional part reads as absent, whatever its first string holds.
func decodeJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	d := &jsonDecoder{dec: dec, body: body}
	v, err := d.value()
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("%w: data after the JSON value", ErrMalformedBody)
		}
		if d.refused != nil {
			return nil, d.refused
		}
		return v, nil
	}
	// The decoder's message quotes the offending byte: only its offset is told.
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return nil, fmt.Errorf("%w: invalid JSON at byte %d", ErrMalformedBody, syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: JSON cut short", ErrMalformedBody)
	}
	return nil, fmt.Errorf("%w: invalid JSON", ErrMalformedBody)
}

// repeatedMemberError is an object with a member name twice; it matches ErrInvalid.
type repeatedMemberError struct{ offset int64 }

func (e *repeatedMemberError) Error() string {
	return fmt.Sprintf("keyfunc: invalid value: object member repeated at byte %d", e.offset)
}

func (e *repeatedMemberError) Is(target error) bool { return target == ErrInvalid }

// loneSurrogateError is a JSON string holding a \u escape of a UTF-16 surrogate that is not
// half of a pair ("\ud800" alone, or a low "\udfff" first). encoding/json reads it as
// U+FFFD, so "\ud800", "\udfff" and "\ufffd" would give one key and one body hash, and two
// requests a handler may tell apart would share a lock. RFC 8259 leaves such strings'
// meaning unpredictable and I-JSON (RFC 7493) forbids them; the body is refused. It matches
// ErrInvalid; like every body error it tells the offset, never the bytes.
type loneSurrogateError struct{ offset int64 }

func (e *loneSurrogateError) Error() string {
	return fmt.Sprintf("keyfunc: invalid value: JSON string with an unpaired UTF-16 surrogate escape at byte %d", e.offset)
}

func (e *loneSurrogateError) Is(target error) bool { return target == ErrInvalid }

// jsonDecoder reads body through dec token by token into the types json.Decoder.Decode gives
// an any (with UseNumber). It notes the first repeated object member or lone surrogate in
// refused and reads on, so that a body that goes wrong later is told as malformed.
type jsonDecoder struct {
	dec     *json.Decoder
	body    []byte // what dec reads, to look at a string token's escapes
	refused error  // the first repeatedMemberError or loneSurrogateError
}

// value reads the next JSON value.
func (d *jsonDecoder) value() (any, error) {
	tok, err := d.token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for d.dec.More() {
			name, err := d.token()
			if err != nil {
				return nil, err
			}
			k, _ := name.(string) // the decoder only gives strings as member names
			if _, dup := obj[k]; dup && d.refused == nil {
				d.refused = &repeatedMemberError{offset: d.dec.InputOffset()}
			}
			if obj[k], err = d.value(); err != nil {
				return nil, err
			}
		}
		_, err := d.dec.Token() // '}'
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for d.dec.More() {
			el, err := d.value()
			if err != nil {
				return nil, err
			}
			arr = append(arr, el)
		}
		_, err := d.dec.Token() // ']'
		return arr, err
	}
	return tok, nil // string, json.Number, bool or nil
}

// token is dec.Token, noting a string token with a lone surrogate escape. The decoded text
// hides it (it holds U+FFFD, as for a "\ufffd" escape or the character itself), so the
// token's bytes in body are read again, only for a string holding U+FFFD.
func (d *jsonDecoder) token() (json.Token, error) {
	start := d.dec.InputOffset()
	tok, err := d.dec.Token()
	if s, ok := tok.(string); ok && err == nil && d.refused == nil && strings.ContainsRune(s, utf8.RuneError) {
		if i := loneSurrogate(d.body[start:d.dec.InputOffset()]); i >= 0 {
			d.refused = &loneSurrogateError{offset: start + int64(i)}
		}
	}
	return tok, err
}

// loneSurrogate returns the index in raw (JSON text: string literals, whitespace and
// separators) of the first \u escape of a UTF-16 surrogate that does not pair with the next
// escape as encoding/json pairs them (a high surrogate directly followed by a low one), or -1.
func loneSurrogate(raw []byte) int {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 == len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a two-byte escape: its second byte may be a backslash
			continue
		}
		r := hex4(raw[i+2:])
		if r < 0 || !utf16.IsSurrogate(r) {
			i += 5
			continue
		}
		if _, ok := surrogatePair(raw, i, r); !ok {
			return i
		}
		i += 11 // a pair
	}
	return -1
}

// surrogatePair reports whether the \u escape at s[i:] of surrogate r is the high half of a
// pair as encoding/json pairs them (directly followed by the \u escape of a low surrogate),
// and returns that low half.
func surrogatePair[T string | []byte](s T, i int, r rune) (rune, bool) {
	if r >= 0xdc00 || i+12 > len(s) || s[i+6] != '\\' || s[i+7] != 'u' {
		return 0, false
	}
	low := hex4(s[i+8 : i+12])
	return low, low >= 0xdc00 && low <= 0xdfff
}

// hex4 is the value of the four hex digits that start b, or -1.
func hex4[T string | []byte](b T) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for i := range 4 {
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
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
