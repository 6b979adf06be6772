package keyfunc

import (
	"crypto/sha256"
	"encoding/base64"
)

const (
	// missingMarker renders an absent optional part. '~' is always escaped in values, so no
	// present value (not even "") renders the same.
	missingMarker = "~"
	// hashMarker starts a hashed value; '#' is always escaped in values.
	hashMarker = '#'
	// hashChars is the number of base64url characters kept from a SHA-256 (132 bits).
	hashChars = 22
	// hashedLen is the rendered length of a hashed value or a hashed key tail.
	hashedLen = 1 + hashChars
)

// Hash domains keep a hashed value, a hashed key tail and a body hash from ever sharing a
// preimage.
const (
	domainValue = "keyfunc/value\x00"
	domainKey   = "keyfunc/key\x00"
	domainJSON  = "keyfunc/body-json\x00"
	domainRaw   = "keyfunc/body-raw\x00"
	domainParts = "keyfunc/body-multipart\x00"
)

// safeByte reports whether b is copied into a key as is. Every other byte is written %XX.
// Keeping the set to [A-Za-z0-9._-] means a value never contains a separator, a marker,
// a brace, whitespace, a control character or a non-ASCII byte.
func safeByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '-' || b == '.' || b == '_'
}

// renderedByte reports whether b can occur in a rendered value: the safe bytes, the
// escape alphabet, and the two markers. Template literals between placeholders must hold
// at least one byte outside this set.
func renderedByte(b byte) bool {
	return safeByte(b) || b == '%' || b == hashMarker || b == '~'
}

// escapedLen is the length of escape(s) without building it.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			n += 2
		}
	}
	return n
}

// appendEscaped appends s with every unsafe byte written as %XX (upper-case hex).
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		b := s[i]
		if safeByte(b) {
			dst = append(dst, b)
			continue
		}
		dst = append(dst, '%', hex[b>>4], hex[b&0xF])
	}
	return dst
}

// appendHashed appends '#' and the first 22 base64url characters of SHA-256(domain+s).
func appendHashed(dst []byte, domain, s string) []byte {
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write([]byte(s))
	var sum [sha256.Size]byte
	var enc [43]byte
	base64.RawURLEncoding.Encode(enc[:], h.Sum(sum[:0]))
	dst = append(dst, hashMarker)
	return append(dst, enc[:hashChars]...)
}

// appendValue renders a present value: escaped, or hashed when the escaped form is longer
// than hashAbove bytes (hashAbove < 0 hashes every value).
func appendValue(dst []byte, v string, hashAbove int) []byte {
	if hashAbove < 0 || escapedLen(v) > hashAbove {
		return appendHashed(dst, domainValue, v)
	}
	return appendEscaped(dst, v)
}
