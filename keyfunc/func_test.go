package keyfunc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPartCaps(t *testing.T) {
	tests := []struct {
		name string
		f    *Func
		src  *MapSource
		err  error
	}{
		{"param at default cap", Join(Param("v")), &MapSource{Params: map[string]string{"v": strings.Repeat("a", DefaultMaxLen)}}, nil},
		{"param over default cap", Join(Param("v")), &MapSource{Params: map[string]string{"v": strings.Repeat("a", DefaultMaxLen+1)}}, ErrTooLong},
		{"header over 255", Join(Header("X")), &MapSource{Header: map[string]string{"X": strings.Repeat("a", 256)}}, ErrTooLong},
		{"idempotency key 255", Join(IdempotencyKey()), &MapSource{Header: map[string]string{"Idempotency-Key": strings.Repeat("a", 255)}}, nil},
		{"idempotency key 256", Join(IdempotencyKey()), &MapSource{Header: map[string]string{"Idempotency-Key": `"` + strings.Repeat("a", 256) + `"`}}, ErrTooLong},
		{"json over 4096", Join(JSON("a")), &MapSource{Payload: []byte(`{"a":"` + strings.Repeat("a", 4097) + `"}`)}, ErrTooLong},
		{"json at 4096", Join(JSON("a")), &MapSource{Payload: []byte(`{"a":"` + strings.Repeat("a", 4096) + `"}`)}, nil},
		{"part MaxLen", Join(Param("v").MaxLen(3)), &MapSource{Params: map[string]string{"v": "abcd"}}, ErrTooLong},
		{"part MaxLen(0) uncaps", Join(Param("v").MaxLen(0)), &MapSource{Params: map[string]string{"v": strings.Repeat("a", 5000)}}, nil},
		{"WithMaxPartLen", Join(Param("v")).With(WithMaxPartLen(3)), &MapSource{Params: map[string]string{"v": "abcd"}}, ErrTooLong},
		{"part MaxLen wins", Join(Param("v").MaxLen(10)).With(WithMaxPartLen(3)), &MapSource{Params: map[string]string{"v": "abcd"}}, nil},
		{"const uncapped", Join(Const(strings.Repeat("c", 5000))).With(WithMaxPartLen(3)), &MapSource{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.f.Key(tt.src)
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && len(k) > DefaultHashAbove {
				t.Errorf("long value not hashed: %d bytes", len(k))
			}
		})
	}
}

func TestKeyLengthBound(t *testing.T) {
	parts := make(map[string]Part)
	var tmpl strings.Builder
	src := &MapSource{Params: map[string]string{}}
	for i := range 10 {
		n := fmt.Sprintf("p%d", i)
		parts[n] = Param(n)
		fmt.Fprintf(&tmpl, "/{%s}", n)
		src.Params[n] = strings.Repeat(":", 20) // 60 escaped bytes each: 10*61 > 256
	}
	f := MustTemplate(tmpl.String(), parts)
	k1, err := f.Key(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != DefaultMaxKeyLen || k1[len(k1)-hashedLen] != '#' {
		t.Fatalf("key %d bytes: %q", len(k1), k1)
	}
	if !strings.HasPrefix(k1, "/"+strings.Repeat("%3A", 20)+"/") {
		t.Errorf("head not kept: %q", k1)
	}
	src.Params["p9"] = strings.Repeat(":", 19) // differs only in the cut-off tail
	k2, _ := f.Key(src)
	if k1 == k2 || len(k2) != DefaultMaxKeyLen {
		t.Errorf("tail change not reflected: %q vs %q", k1, k2)
	}
	short, _ := f.With(WithMaxKeyLen(1)).Key(src)
	if len(short) != MinKeyLen {
		t.Errorf("WithMaxKeyLen(1): %d bytes, want %d", len(short), MinKeyLen)
	}
	long, _ := f.With(WithMaxKeyLen(1000)).Key(src)
	if strings.Contains(long, "#") {
		t.Errorf("WithMaxKeyLen(1000) hashed: %q", long)
	}
}

func TestScope(t *testing.T) {
	f := Join(Query("a"), Query("b").Optional())
	scoped := f.Scope(ContextValue("user"), Meta(MetaRoute))
	key := func(user, a, b string) string {
		t.Helper()
		src := &MapSource{Ctx: ctxWithString("user", user), Meta: map[string]string{MetaRoute: "/pay"}, Query: map[string]string{"a": a}}
		if b != "" {
			src.Query["b"] = b
		}
		k, err := scoped.Key(src)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if got, want := key("u1", "x", "y"), "u1:%2Fpay|x:y"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	// The attacker (u2) controls a and b completely; they must never reach u1's key.
	victim := key("u1", "x", "y")
	for _, ab := range [][2]string{{"u1:%2Fpay|x", "y"}, {"u1", "%2Fpay|x:y"}, {"|x", "y"}, {"x", "y"}} {
		if key("u2", ab[0], ab[1]) == victim {
			t.Errorf("u2 with %q forged u1's key", ab)
		}
	}
	if got := f.Scope(Const("t")).Scope(Const("outer")).String(); got != "{const}:{const}|{a}:{b}" {
		t.Errorf("String = %q", got)
	}
	nested, _ := Join(Const("k")).Scope(Const("inner")).Scope(Const("outer")).Key(&MapSource{})
	if nested != "outer:inner|k" {
		t.Errorf("nested scope = %q", nested)
	}
	_, err := scoped.Key(&MapSource{Query: map[string]string{"a": "x"}})
	var pe *PartError
	if !errors.As(err, &pe) || pe.Part != "user" || !errors.Is(err, ErrMissing) {
		t.Errorf("missing scope part: %v", err)
	}
	if f.UsesIdempotencyKey() || !f.Scope(IdempotencyKey()).UsesIdempotencyKey() ||
		!Join(Header("idempotency-key")).UsesIdempotencyKey() {
		t.Error("UsesIdempotencyKey wrong")
	}
}

func TestBodyReadOnce(t *testing.T) {
	src := &countingSource{MapSource: MapSource{Payload: []byte(`{"a":1,"b":{"c":"x"}}`)}}
	f := Join(JSON("a"), JSON("b.c"), BodyHash(), Form("z").Optional(), JSON("nope").Optional())
	if _, err := f.Key(src); err != nil {
		t.Fatal(err)
	}
	if src.bodyCalls != 1 {
		t.Errorf("Body called %d times, want 1", src.bodyCalls)
	}
	src.bodyCalls = 0
	if _, err := Join(Param("x").Optional(), Const("c")).Key(src); err != nil || src.bodyCalls != 0 {
		t.Errorf("body read without body parts: %d calls, err %v", src.bodyCalls, err)
	}
}

func TestBodyErrors(t *testing.T) {
	tooLarge := fmt.Errorf("reading body: %w", ErrBodyTooLarge)
	tests := []struct {
		name string
		f    *Func
		src  *MapSource
		want string
		err  error
	}{
		{"too large", Join(JSON("a")), &MapSource{BodyErr: tooLarge}, "", ErrBodyTooLarge},
		{"too large optional", Join(JSON("a").Optional()), &MapSource{BodyErr: tooLarge}, "", ErrBodyTooLarge},
		{"too large hash", Join(BodyHash()), &MapSource{BodyErr: tooLarge}, "", ErrBodyTooLarge},
		{"malformed", Join(JSON("a")), &MapSource{Payload: []byte(`{"a":`)}, "", ErrMalformedBody},
		{"trailing data", Join(JSON("a")), &MapSource{Payload: []byte(`{"a":1} x`)}, "", ErrMalformedBody},
		{"not JSON, optional", Join(JSON("a").Optional()), &MapSource{Payload: []byte(`nope`)}, "~", nil},
		{"form body, optional", Join(JSON("a").Optional()), &MapSource{Payload: []byte(`a=5`)}, "~", nil},
		// A body that starts like an object but does not parse is not "no value": a more
		// lenient handler decoder may read a=5 from each of these.
		{"trailing data, optional", Join(JSON("a").Optional()), &MapSource{Payload: []byte(`{"a":"5"} x`)}, "", ErrMalformedBody},
		{"invalid UTF-8 elsewhere, optional", Join(JSON("a").Optional()), &MapSource{Payload: []byte("{\"a\":\"5\",\"n\":\"\xff\"}")}, "", ErrMalformedBody},
		{"too deep elsewhere, optional", Join(JSON("a").Optional()), &MapSource{Payload: []byte(`{"a":"5","p":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`)}, "", ErrMalformedBody},
		{"cut short, optional", Join(JSON("a").Optional()), &MapSource{Payload: []byte(` [{"a":`)}, "", ErrMalformedBody},
		{"empty body", Join(JSON("a")), &MapSource{}, "", ErrMissing},
		{"too deep", Join(JSON("a")), &MapSource{Payload: []byte(strings.Repeat("[", 65) + strings.Repeat("]", 65))}, "", ErrMalformedBody},
		{"deep but allowed", Join(JSON("a").Optional()), &MapSource{Payload: []byte(strings.Repeat("[", 64) + strings.Repeat("]", 64))}, "~", nil},
		{"brackets in strings", Join(JSON("a")), &MapSource{Payload: []byte(`{"a":"` + strings.Repeat("[", 100) + `\"]"}`)}, "", nil},
		{"exponent out of range", Join(JSON("a")), &MapSource{Payload: []byte(`{"a":1e9999999999}`)}, "", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.f.Key(tt.src)
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.want != "" && k != tt.want {
				t.Errorf("Key = %q, want %q", k, tt.want)
			}
		})
	}
}

func TestNilSource(t *testing.T) {
	if _, err := Join(Const("a")).Key(nil); err == nil {
		t.Error("nil Source accepted")
	}
}

func TestZeroFunc(t *testing.T) {
	var f Func
	if _, err := f.Key(&MapSource{}); err == nil {
		t.Error("zero Func gave a key")
	}
	var nf *Func
	if _, err := nf.Key(&MapSource{}); err == nil || nf.String() != "" {
		t.Error("nil Func gave a key")
	}
}

func BenchmarkKey(b *testing.B) {
	f := MustTemplate("pay:{order}:{key}", map[string]Part{
		"order": JSON("order.id"),
		"key":   IdempotencyKey(),
	}).Scope(Meta(MetaRoute), ContextValue("user"))
	src := &MapSource{
		Ctx:     ctxWithString("user", "u-42"),
		Meta:    map[string]string{MetaRoute: "/payments"},
		Header:  map[string]string{"Idempotency-Key": `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		Payload: []byte(`{"order":{"id":"A-17","amount":1250,"items":[{"sku":"s1","qty":2}]}}`),
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Key(src); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRequiredParams(t *testing.T) {
	f := MustTemplate("acct:{a}:{b}:{c}", map[string]Part{
		"a": Param("account_id"),
		"b": Param("sub").Optional(),
		"c": Query("x"),
	}).Scope(Param("tenant"))
	got := f.RequiredParams()
	if want := []string{"tenant", "account_id"}; !slices.Equal(got, want) {
		t.Fatalf("RequiredParams = %q, want %q", got, want)
	}
	if got := Join(Const("x")).RequiredParams(); len(got) != 0 {
		t.Fatalf("no Param parts: %q", got)
	}
}

func TestIsInputError(t *testing.T) {
	src := &MapSource{}
	_, missing := Join(Header("X-Account")).Key(src)
	errLookup := errors.New("lookup: connection refused")
	_, lookup := Join(From("tenant", func(Source) (string, error) { return "", errLookup })).Key(src)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"missing header", missing, true},
		{"From error", lookup, false},
		{"wrapped ErrTooLong", fmt.Errorf("x: %w", ErrTooLong), true},
		{"body too large", &PartError{Part: "b", Err: ErrBodyTooLarge}, true},
		{"malformed body", ErrMalformedBody, true},
		{"invalid", ErrInvalid, true},
		{"template", ErrTemplate, false},
		{"unsupported context value", ErrUnsupportedType, false},
		{"unusable context value", &PartError{Part: "user", Err: ErrContextValue}, false},
		{"nil", nil, false},
	} {
		if got := IsInputError(tc.err); got != tc.want {
			t.Errorf("%s: IsInputError(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if !errors.Is(lookup, errLookup) {
		t.Fatalf("From error not wrapped: %v", lookup)
	}
}

// A nil Option is skipped, as in the other packages (an option left nil by a configuration
// switch): the options around it still apply.
func TestNilOptionSkipped(t *testing.T) {
	src := &MapSource{Params: map[string]string{"v": "abcd"}}
	var none Option
	tmpl, err := Template("t:{v}", map[string]Part{"v": Param("v")}, none, WithMaxPartLen(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Key(src); !errors.Is(err, ErrTooLong) {
		t.Fatalf("Template with nil options: %v, want ErrTooLong from WithMaxPartLen(3)", err)
	}
	f := Join(Param("v")).With(nil, WithMaxPartLen(3), none)
	if _, err := f.Key(src); !errors.Is(err, ErrTooLong) {
		t.Fatalf("With nil options: %v, want ErrTooLong from WithMaxPartLen(3)", err)
	}
}
