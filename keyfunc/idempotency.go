package keyfunc

import (
	"fmt"
	"strings"
)

// parseIdempotencyKey accepts the header as an RFC 8941 sf-string ("abc", with \" and \\
// escapes) or as a bare value (abc), after trimming spaces and tabs. The key must be
// non-empty printable ASCII (0x20..0x7E). Parameters after an sf-string are not accepted.
// Length is checked by the caller against the part's cap.
func parseIdempotencyKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: empty Idempotency-Key", ErrInvalid)
	}
	if v[0] != '"' {
		if strings.IndexFunc(v, nonPrintable) >= 0 {
			return "", fmt.Errorf("%w: Idempotency-Key holds a byte outside printable ASCII", ErrInvalid)
		}
		if strings.IndexByte(v, ',') >= 0 {
			// Two keys: repeated header lines, combined as RFC 9110 does, or a list. A key
			// with a comma in it is sent quoted.
			return "", fmt.Errorf("%w: Idempotency-Key holds more than one key (a comma outside quotes)", ErrInvalid)
		}
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || v[i] != '"' && v[i] != '\\' {
				return "", fmt.Errorf("%w: Idempotency-Key has a bad escape", ErrInvalid)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w: Idempotency-Key has data after its closing quote", ErrInvalid)
			}
			if b.Len() == 0 {
				return "", fmt.Errorf("%w: empty Idempotency-Key", ErrInvalid)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7E:
			return "", fmt.Errorf("%w: Idempotency-Key holds a byte outside printable ASCII", ErrInvalid)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: Idempotency-Key lacks its closing quote", ErrInvalid)
}

func nonPrintable(r rune) bool { return r < 0x20 || r > 0x7E }
