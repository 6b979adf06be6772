package keyfunc

import (
	"errors"
	"strings"
	"testing"
)

func TestIdempotencyKey(t *testing.T) {
	tests := []struct {
		header string
		want   string
		err    error
	}{
		{`"abc"`, "abc", nil},
		{`abc`, "abc", nil},
		{` "abc" `, "abc", nil},
		{"\tabc\t", "abc", nil},
		{`"a\"b\\c"`, "a%22b%5Cc", nil},
		{`"with space"`, "with%20space", nil},
		{`550e8400-e29b-41d4-a716-446655440000`, "550e8400-e29b-41d4-a716-446655440000", nil},
		{``, "", ErrMissing},
		{" \t ", "", ErrMissing},
		{`""`, "", ErrInvalid},
		{`"abc`, "", ErrInvalid},
		{`"a"b"`, "", ErrInvalid},
		{`"abc";p=1`, "", ErrInvalid},
		{`"a\nb"`, "", ErrInvalid},
		{`"a\x"`, "", ErrInvalid},
		{"a\x01b", "", ErrInvalid},
		{"a\x7fb", "", ErrInvalid},
		{"caf\xc3\xa9", "", ErrInvalid},
		{"\xff", "", ErrInvalid},
		{"\"\xff\"", "", ErrInvalid},
		{`k11, k12`, "", ErrInvalid}, // two header lines combined, or a list
		{`"k11", "k12"`, "", ErrInvalid},
		{`"a,b"`, "a%2Cb", nil}, // a comma inside quotes is part of the key
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			k, err := Join(IdempotencyKey()).Key(&MapSource{Header: map[string]string{"idempotency-key": tt.header}})
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if k != tt.want {
				t.Errorf("Key = %q, want %q", k, tt.want)
			}
		})
	}
	// Bare and sf-string forms of one key give one lock key.
	a, _ := Join(IdempotencyKey()).Key(&MapSource{Header: map[string]string{"Idempotency-Key": `"k"`}})
	b, _ := Join(IdempotencyKey()).Key(&MapSource{Header: map[string]string{"Idempotency-Key": `k`}})
	if a != b {
		t.Errorf("sf-string %q and bare %q differ", a, b)
	}
	// An empty header under an Optional part is absent: the "~" marker, like no header.
	opt := Join(IdempotencyKey().Optional())
	none, err := opt.Key(&MapSource{})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := opt.Key(&MapSource{Header: map[string]string{"Idempotency-Key": " "}})
	if err != nil || empty != none || none != "~" {
		t.Errorf("Optional: empty header gives %q, %v; no header gives %q; want both %q", empty, err, none, "~")
	}
	// Repeated header lines (a source that has them all): lines all sent empty are absent, as
	// one is; a key with any other line, even an empty one, is refused.
	for _, tt := range []struct {
		lines []string
		want  string
		err   error
	}{
		{[]string{"", ""}, "~", nil},
		{[]string{" ", "\t"}, "~", nil},
		{[]string{"k1", ""}, "", ErrInvalid},
		{[]string{"k1", "k2"}, "", ErrInvalid},
		{[]string{"", "k1"}, "", ErrInvalid},
		{[]string{"k1", "k1"}, "", ErrInvalid},
		// Two lines that, joined as RFC 9110 combines them, would read as the one quoted key
		// "a, b": still a key sent twice.
		{[]string{`"a`, `b"`}, "", ErrInvalid},
	} {
		src := &linesSource{MapSource{Header: map[string]string{"Idempotency-Key": tt.lines[0]}}, tt.lines}
		if k, err := opt.Key(src); k != tt.want || !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
			t.Errorf("header lines %q: %q, %v; want %q, %v", tt.lines, k, err, tt.want, tt.err)
		}
	}
}

// linesSource is a MultiValueSource whose Idempotency-Key came in several header lines.
type linesSource struct {
	MapSource
	lines []string
}

func (s *linesSource) Values(kind Kind, name string) []string {
	if kind == KindHeader && strings.EqualFold(name, IdempotencyKeyHeader) {
		return s.lines
	}
	return nil
}
