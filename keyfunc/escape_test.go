package keyfunc

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEscaping(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc-._XYZ09", "abc-._XYZ09"},
		{"a:b", "a%3Ab"},
		{"100%", "100%25"},
		{"{tag}", "%7Btag%7D"},
		{"a b\tc\n", "a%20b%09c%0A"},
		{"x|y#z~", "x%7Cy%23z%7E"},
		{"\x00\x7f", "%00%7F"},
		{"é", "%C3%A9"},
		{"\xff\xfe", "%FF%FE"},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := Join(Param("v")).Key(&MapSource{Params: map[string]string{"v": tt.in}})
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if escapedLen(tt.in) != len(tt.want) {
			t.Errorf("escapedLen(%q) = %d, want %d", tt.in, escapedLen(tt.in), len(tt.want))
		}
	}
}

func TestNoCollisions(t *testing.T) {
	two := Join(Query("a").Optional(), Query("b").Optional())
	keyOf := func(a, b *string) string {
		src := &MapSource{Query: map[string]string{}}
		if a != nil {
			src.Query["a"] = *a
		}
		if b != nil {
			src.Query["b"] = *b
		}
		k, err := two.Key(src)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	s := func(v string) *string { return &v }
	pairs := [][2][2]*string{
		{{s("a:b"), s("c")}, {s("a"), s("b:c")}},
		{{s("a%3Ab"), s("c")}, {s("a:b"), s("c")}},
		{{s(""), s("x")}, {nil, s("x")}},
		{{s("~"), nil}, {nil, nil}},
		{{s("#"), s("")}, {s(""), s("#")}},
	}
	for _, p := range pairs {
		k1, k2 := keyOf(p[0][0], p[0][1]), keyOf(p[1][0], p[1][1])
		if k1 == k2 {
			t.Errorf("collision: %q", k1)
		}
	}
}

// TestNoCollisionsRandom derives keys for many random value tuples drawn from an alphabet
// rich in separators, escape and marker bytes, and checks that equal keys only ever come
// from equal tuples, for Join, a Template with a multi-byte separator, and a scoped Func.
func TestNoCollisionsRandom(t *testing.T) {
	alphabet := []string{"a", ":", "|", "%", "3A", "7C", "#", "~", "/", "-", "{", "\xff"}
	rng := rand.New(rand.NewPCG(1, 2))
	randValue := func() (string, bool) {
		if rng.IntN(8) == 0 {
			return "", false // absent
		}
		n := rng.IntN(4) // short values meet often; a few long ones get hashed
		if rng.IntN(20) == 0 {
			n = 20 + rng.IntN(20)
		}
		var b strings.Builder
		for ; n > 0; n-- {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String(), true
	}
	funcs := map[string]*Func{
		"join": Join(Query("a").Optional(), Query("b").Optional(), Query("c").Optional()),
		"template": MustTemplate("x-{a}/-{b}:~{c}~", map[string]Part{
			"a": Query("a").Optional(), "b": Query("b").Optional(), "c": Query("c").Optional(),
		}),
		"scoped": Join(Query("c").Optional()).Scope(Query("a").Optional(), Query("b").Optional()),
	}
	for name, f := range funcs {
		t.Run(name, func(t *testing.T) {
			seen := make(map[string]string)
			for range 20000 {
				src := &MapSource{Query: map[string]string{}}
				var tuple strings.Builder
				for _, n := range []string{"a", "b", "c"} {
					if v, ok := randValue(); ok {
						src.Query[n] = v
						tuple.WriteString("+" + v + "\x01")
					} else {
						tuple.WriteString("-\x01")
					}
				}
				k, err := f.Key(src)
				if err != nil {
					t.Fatal(err)
				}
				if prev, ok := seen[k]; ok && prev != tuple.String() {
					t.Fatalf("key %q from %q and %q", k, prev, tuple.String())
				}
				seen[k] = tuple.String()
			}
		})
	}
}

func TestHashing(t *testing.T) {
	long := strings.Repeat("x", 65)
	exact := strings.Repeat("x", 64)
	key := func(f *Func, v string) string {
		t.Helper()
		k, err := f.Key(&MapSource{Params: map[string]string{"v": v}})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	f := Join(Param("v"))
	if got := key(f, exact); got != exact {
		t.Errorf("64 bytes hashed: %q", got)
	}
	h := key(f, long)
	if len(h) != hashedLen || h[0] != '#' {
		t.Errorf("65 bytes: %q, want # and 22 chars", h)
	}
	if key(f, long) != h || key(f, long+"y") == h {
		t.Error("hash not deterministic or not distinct")
	}
	// 22 colons escape to 66 bytes: hashed, though the raw value is short.
	if got := key(f, strings.Repeat(":", 22)); len(got) != hashedLen {
		t.Errorf("escaped length not used: %q", got)
	}
	if got := key(Join(Param("v").HashAbove(0)), "a"); len(got) != hashedLen {
		t.Errorf("HashAbove(0): %q", got)
	}
	if got := key(Join(Param("v").HashAbove(200)), long); got != long {
		t.Errorf("HashAbove(200): %q", got)
	}
	if got := key(Join(Param("v")).With(WithHashAbove(4)), "abcde"); len(got) != hashedLen {
		t.Errorf("WithHashAbove(4): %q", got)
	}
	if got := key(Join(Param("v").HashAbove(10)).With(WithHashAbove(4)), "abcde"); got != "abcde" {
		t.Errorf("part HashAbove must win over WithHashAbove: %q", got)
	}
}
