package keyfunc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type userKey struct{}

type userID int64

type stringerID struct{ id string }

func (s stringerID) String() string { return "u-" + s.id }

// countingSource counts Body calls.
type countingSource struct {
	MapSource
	bodyCalls int
}

func (s *countingSource) Body() ([]byte, error) {
	s.bodyCalls++
	return s.MapSource.Body()
}

func ctxWith(v any) context.Context { return context.WithValue(context.Background(), userKey{}, v) }

func TestParts(t *testing.T) {
	src := &MapSource{
		Ctx:     ctxWith("alice"),
		Params:  map[string]string{"id": "42", "empty": ""},
		Query:   map[string]string{"page": "7"},
		Header:  map[string]string{"X-Tenant": "acme", "Idempotency-Key": `"k-1"`},
		Form:    map[string]string{"served": "by-adapter"},
		Meta:    map[string]string{MetaRoute: "/orders/:id", MetaTaskType: "pay:charge"},
		Payload: []byte(`{"order":{"id":"A-17","n":1E2,"big":123456789012345678901234567890},"items":[{"sku":"s1"}],"ok":true,"nil":null}`),
	}
	tests := []struct {
		name string
		part Part
		want string
	}{
		{"param", Param("id"), "42"},
		{"param present empty", Param("empty"), ""},
		{"query", Query("page"), "7"},
		{"header case-insensitive", Header("x-tenant"), "acme"},
		{"idempotency sf-string", IdempotencyKey(), "k-1"},
		{"meta", Meta(MetaRoute), "%2Forders%2F%3Aid"},
		{"meta task", Meta(MetaTaskType), "pay%3Acharge"},
		{"form from adapter", Form("served"), "by-adapter"},
		{"json string", JSON("order.id"), "A-17"},
		{"json number canonical", JSON("order.n"), "100"},
		{"json big number exact", JSON("order.big"), "123456789012345678901234567890"},
		{"json array index", JSON("items.0.sku"), "s1"},
		{"json bool", JSON("ok"), "true"},
		{"json object canonical", JSON("items.0"), "%7B%22sku%22%3A%22s1%22%7D"},
		{"context string", ContextValue(userKey{}), "alice"},
		{"const", Const("v1"), "v1"},
		{"from", From("f", func(s Source) (string, error) { v, _ := s.Value(KindQuery, "page"); return "p" + v, nil }), "p7"},
		{"optional present", Query("page").Optional(), "7"},
		{"optional missing", Query("nope").Optional(), "~"},
		{"optional json null", JSON("nil").Optional(), "~"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Join(tt.part).Key(src)
			if err != nil {
				t.Fatalf("Key: %v", err)
			}
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFormFromBody(t *testing.T) {
	src := &MapSource{Payload: []byte("amount=10&note=a+b%3Ac&amount=11")}
	got, err := Join(Form("amount"), Form("note"), Form("absent").Optional()).Key(src)
	if err != nil {
		t.Fatal(err)
	}
	if want := "10:a%20b%3Ac:~"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	// Pairs that do not parse are skipped, as net/http's ParseForm skips them for the
	// handler; the others still count.
	for _, body := range []string{"amount=5&a;b", "amount=5&x=%zz", "x=%zz&amount=5"} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		_ = r.ParseForm()
		got, err := Join(Form("amount").Optional()).Key(&MapSource{Payload: []byte(body)})
		if err != nil || got != r.PostForm.Get("amount") {
			t.Errorf("form %q: key %q, %v; the handler reads amount %q", body, got, err, r.PostForm.Get("amount"))
		}
	}
	if _, err := Join(Form("amount")).Key(&MapSource{Payload: []byte("amount=%zz")}); !errors.Is(err, ErrMissing) {
		t.Errorf("form whose only amount does not parse: err = %v, want ErrMissing (the handler sees none)", err)
	}
}

// Form reads the body as a form only where net/http's ParseForm does (an urlencoded body of a
// POST, PUT or PATCH; a source that names neither counts as one), falls back to the query,
// and refuses a field the query and the body give different values.
func TestFormWhereTheHandlerReadsIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    *MapSource
		want   string // "" for ErrInvalid
		absent bool
	}{
		{"body, no content type or method", &MapSource{Payload: []byte("a=1")}, "1", false},
		{"urlencoded POST", &MapSource{Payload: []byte("a=1"),
			Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
			Meta:   map[string]string{MetaMethod: "POST"}}, "1", false},
		{"text/plain body", &MapSource{Payload: []byte("a=1"), Header: map[string]string{"Content-Type": "text/plain"}}, "", true},
		{"JSON body", &MapSource{Payload: []byte("a=1"), Header: map[string]string{"Content-Type": "application/json"}}, "", true},
		{"urlencoded DELETE", &MapSource{Payload: []byte("a=1"),
			Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			Meta:   map[string]string{MetaMethod: "DELETE"}}, "", true},
		{"urlencoded with a parameter that does not parse", &MapSource{Payload: []byte("a=1"),
			Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset"},
			Meta:   map[string]string{MetaMethod: "POST"}}, "1", false},
		{"HTTP POST without a content type", &MapSource{Payload: []byte("a=1"),
			Meta: map[string]string{MetaMethod: "POST"}}, "", true},
		{"query only", &MapSource{Query: map[string]string{"a": "2"}}, "2", false},
		{"text/plain body, query", &MapSource{Payload: []byte("a=1"), Query: map[string]string{"a": "2"},
			Header: map[string]string{"Content-Type": "text/plain"}}, "2", false},
		{"same in both", &MapSource{Payload: []byte("a=1"), Query: map[string]string{"a": "1"}}, "1", false},
		{"differ", &MapSource{Payload: []byte("a=1"), Query: map[string]string{"a": "2"}}, "", false},
		{"adapter's form differs from query", &MapSource{Form: map[string]string{"a": "1"}, Query: map[string]string{"a": "2"}}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Join(Form("a").Optional()).Key(tc.src)
			switch {
			case tc.absent && (err != nil || got != missingMarker):
				t.Errorf("key %q, %v; want the field absent", got, err)
			case !tc.absent && tc.want == "" && !errors.Is(err, ErrInvalid):
				t.Errorf("key %q, %v; want ErrInvalid", got, err)
			case !tc.absent && tc.want != "" && (err != nil || got != tc.want):
				t.Errorf("key %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestContextValueTypes(t *testing.T) {
	var nilStringer *stringerPtr
	tests := []struct {
		name    string
		ctx     context.Context
		want    string
		wantErr error
	}{
		{"string", ctxWith("bob"), "bob", nil},
		{"int64 based", ctxWith(userID(-7)), "-7", nil},
		{"uint", ctxWith(uint8(200)), "200", nil},
		{"stringer", ctxWith(stringerID{"9"}), "u-9", nil},
		{"nil pointer", ctxWith(nilStringer), "", ErrMissing},
		{"nil func Stringer", ctxWith(funcID(nil)), "", ErrMissing},
		{"func Stringer", ctxWith(funcID(func() string { return "f" })), "f", nil},
		{"empty string", ctxWith(""), "", ErrMissing},
		{"spaces and tabs", ctxWith(" \t "), "", ErrMissing},
		{"empty string type", ctxWith(userName("")), "", ErrMissing},
		{"empty stringer", ctxWith(textID("")), "", ErrMissing},
		{"absent", context.Background(), "", ErrMissing},
		{"nil context", nil, "", ErrMissing},
		{"unsupported", ctxWith(3.5), "", ErrUnsupportedType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Join(ContextValue(userKey{}).Named("user")).Key(&MapSource{Ctx: tt.ctx})
			if !errors.Is(err, tt.wantErr) || err == nil && tt.wantErr != nil {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
	// A value of an unsupported type is the server's mistake, not the request's.
	_, err := Join(ContextValue(userKey{}).Named("user")).Key(&MapSource{Ctx: ctxWith(struct{ ID int }{7})})
	var pe *PartError
	if !errors.Is(err, ErrUnsupportedType) || IsInputError(err) || !errors.As(err, &pe) || pe.Part != "user" {
		t.Errorf("struct context value: err = %v (input error %v), want ErrUnsupportedType naming the part, not an input error", err, IsInputError(err))
	}
	// Optional, empty text is absent too: the same key as no value at all.
	opt := Join(Const("pay"), ContextValue(userKey{}).Optional())
	empty, err1 := opt.Key(&MapSource{Ctx: ctxWith("")})
	absent, err2 := opt.Key(&MapSource{Ctx: context.Background()})
	if err1 != nil || err2 != nil || empty != absent {
		t.Errorf("optional part: empty text gives %q (%v), no value %q (%v): want the same key", empty, err1, absent, err2)
	}
}

type userName string

// funcID is a Stringer of a kind that can be nil without being a pointer.
type funcID func() string

func (f funcID) String() string { return f() }

type textID string

func (t textID) String() string { return string(t) }

type stringerPtr struct{}

func (*stringerPtr) String() string { return "never" }

func TestMissingNamesPart(t *testing.T) {
	tests := []struct {
		part Part
		name string
	}{
		{Param("id"), "id"},
		{Query("q"), "q"},
		{Header("X-A"), "X-A"},
		{IdempotencyKey(), "Idempotency-Key"},
		{JSON("order.id"), "order.id"},
		{Form("f"), "f"},
		{Meta(MetaRoute), "route"},
		{ContextValue("uid"), "uid"},
		{From("custom", func(Source) (string, error) { return "", ErrMissing }), "custom"},
		{Param("id").Named("order"), "order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Join(Const("x"), tt.part).Key(&MapSource{Ctx: context.Background()})
			var pe *PartError
			if !errors.As(err, &pe) || !errors.Is(err, ErrMissing) {
				t.Fatalf("err = %v, want *PartError wrapping ErrMissing", err)
			}
			if pe.Part != tt.name {
				t.Errorf("Part = %q, want %q", pe.Part, tt.name)
			}
			if want := `keyfunc: part "` + tt.name + `": missing value`; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestFromError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Join(From("f", func(Source) (string, error) { return "", boom })).Key(&MapSource{})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `part "f": boom`) {
		t.Errorf("err = %v, want wrapped boom naming f", err)
	}
}

func TestBuildPanics(t *testing.T) {
	for name, fn := range map[string]func(){
		"Join()":             func() { Join() },
		"zero Part":          func() { Join(Part{}) },
		"zero scope Part":    func() { Join(Const("a")).Scope(Part{}) },
		"nil ContextValue":   func() { ContextValue(nil) },
		"slice ContextValue": func() { ContextValue([]string{"user"}) },
		"map ContextValue":   func() { ContextValue(map[string]int{}) },
		"nil From function":  func() { From("x", nil) },
		// Names no request carries: every key would fail as the client's fault (400).
		"empty Param":             func() { Param("") },
		"empty Query":             func() { Query("") },
		"empty Header":            func() { Header("") },
		"Header with a space":     func() { Header("X Account") },
		"Header with a colon":     func() { Header("X-Account:") },
		"empty Meta":              func() { Meta("") },
		"empty Form":              func() { Form("") },
		"Const not an integer":    func() { Const("x").Integer() },
		"Const empty, an integer": func() { Const("").Integer() },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			fn()
		})
	}
}

// The names and constants the build checks still take what requests do carry.
func TestBuildAcceptsUsualNames(t *testing.T) {
	src := &MapSource{Header: map[string]string{"X-Account_ID.v2": "7"}, Payload: []byte(`{"a":{"b":[1,{"c":"x"}]}}`)}
	k, err := Join(Header("X-Account_ID.v2"), JSON("a.b.1.c"), JSON("a.b.0"), Const("042").Integer(), Const("-7").Integer()).Key(src)
	if err != nil || k != "7:x:1:42:-7" {
		t.Fatalf("Key = %q, %v", k, err)
	}
}

func ctxWithString(key, v string) context.Context {
	return context.WithValue(context.Background(), key, v)
}

// Header names that differ only in case give one value, whatever the map's order.
func TestMapSourceHeaderCaseIsDeterministic(t *testing.T) {
	src := &MapSource{Header: map[string]string{"x-user": "alice", "X-USER": "bob", "X-uSer": "carol"}}
	for range 200 {
		if k, err := Join(Header("X-User")).Key(src); err != nil || k != "bob" {
			t.Fatalf("Key = %q, %v; want bob (X-USER, the first name in byte order)", k, err)
		}
	}
}

// Integer keys every spelling strconv.ParseInt (and Gin's binding) reads as one number alike,
// from a path parameter, a JSON number or a JSON string; it refuses anything else.
func TestInteger(t *testing.T) {
	same := []struct {
		name string
		src  *MapSource
		part Part
		want string
	}{
		{"param", &MapSource{Params: map[string]string{"id": "42"}}, Param("id"), "42"},
		{"param leading zeros", &MapSource{Params: map[string]string{"id": "0042"}}, Param("id"), "42"},
		{"param plus", &MapSource{Params: map[string]string{"id": "+42"}}, Param("id"), "42"},
		{"param negative zeros", &MapSource{Params: map[string]string{"id": "-007"}}, Param("id"), "-7"},
		{"minus zero", &MapSource{Params: map[string]string{"id": "-0"}}, Param("id"), "0"},
		{"zeros", &MapSource{Params: map[string]string{"id": "000"}}, Param("id"), "0"},
		{"query", &MapSource{Query: map[string]string{"id": "042"}}, Query("id"), "42"},
		{"beyond int64", &MapSource{Params: map[string]string{"id": "0123456789012345678901234567890"}}, Param("id"), "123456789012345678901234567890"},
		{"json number", &MapSource{Payload: []byte(`{"id":42}`)}, JSON("id"), "42"},
		{"json number 42.0", &MapSource{Payload: []byte(`{"id":42.0}`)}, JSON("id"), "42"},
		{"json number 4.2e1", &MapSource{Payload: []byte(`{"id":4.2e1}`)}, JSON("id"), "42"},
		{"json string (,string tag)", &MapSource{Payload: []byte(`{"id":"042"}`)}, JSON("id"), "42"},
		{"json number of 64 digits", &MapSource{Payload: []byte(`{"id":1e63}`)}, JSON("id"), "1" + strings.Repeat("0", 63)},
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Join(Const("account"), tt.part.Integer()).Key(tt.src)
			if err != nil {
				t.Fatalf("Key: %v", err)
			}
			if want := "account:" + tt.want; got != want {
				t.Errorf("Key = %q, want %q", got, want)
			}
		})
	}
	for _, v := range []string{"", "+", "-", "4 2", " 42", "42 ", "0x2a", "4_2", "42.5", "1e3", "--4", "+-4", "٤٢", "42a"} {
		t.Run("invalid "+v, func(t *testing.T) {
			_, err := Join(Param("id").Integer()).Key(&MapSource{Params: map[string]string{"id": v}})
			var pe *PartError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) || pe.Part != "id" {
				t.Errorf("Key of %q = %v, want a *PartError for id matching ErrInvalid", v, err)
			}
		})
	}
	// A JSON number of more than 64 digits keeps its exponent in canonical form: refused
	// rather than spelled out.
	for _, body := range []string{`{"id":42.5}`, `{"id":true}`, `{"id":{"n":1}}`, `{"id":"4e1"}`, `{"id":1e64}`, `{"id":""}`} {
		t.Run("invalid json "+body, func(t *testing.T) {
			if _, err := Join(JSON("id").Integer()).Key(&MapSource{Payload: []byte(body)}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Key of %s = %v, want ErrInvalid", body, err)
			}
		})
	}
	// Without Integer the text counts byte for byte: "042" is another value than "42".
	a, _ := Join(Param("id")).Key(&MapSource{Params: map[string]string{"id": "042"}})
	b, _ := Join(Param("id")).Key(&MapSource{Params: map[string]string{"id": "42"}})
	if a == b {
		t.Errorf("without Integer, 042 and 42 give one key %q", a)
	}
	// The raw value's cap applies before the canonical form is taken.
	long := "+" + strings.Repeat("0", 40) + "1"
	if _, err := Join(Param("id").Integer().MaxLen(10)).Key(&MapSource{Params: map[string]string{"id": long}}); !errors.Is(err, ErrTooLong) {
		t.Errorf("a %d-byte value over a 10-byte cap: %v, want ErrTooLong", len(long), err)
	}
}

// A context value the server set (an auth step's user) that the part cannot use, over its cap
// or not an integer for an Integer part, is the server's fault: ErrContextValue, not the
// ErrTooLong or ErrInvalid that adapters answer with a 400 (ginlock) or archive (asynqlock).
// The same values from the request stay input errors.
func TestUnusableContextValueIsServerError(t *testing.T) {
	long := strings.Repeat("u", DefaultMaxLen+1)
	user := ContextValue(userKey{}).Named("user")
	for _, tc := range []struct {
		name string
		f    *Func
		v    any
	}{
		{"over the default cap", Join(user), long},
		{"stringer over the default cap", Join(user), stringerID{long}},
		{"over MaxLen", Join(user.MaxLen(8)), "user-12345"},
		{"over WithMaxPartLen", Join(user).With(WithMaxPartLen(8)), "user-12345"},
		{"scope over the cap", Join(Const("pay")).Scope(user), long},
		{"not an integer", Join(user.Integer()), "alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.f.Key(&MapSource{Ctx: ctxWith(tc.v)})
			var pe *PartError
			if !errors.Is(err, ErrContextValue) || !errors.As(err, &pe) || pe.Part != "user" {
				t.Fatalf("err = %v, want a *PartError for user matching ErrContextValue", err)
			}
			if IsInputError(err) || errors.Is(err, ErrTooLong) || errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v is counted as the request's fault (IsInputError %v)", err, IsInputError(err))
			}
			if strings.Contains(err.Error(), "user-12345") || strings.Contains(err.Error(), "uuuu") || strings.Contains(err.Error(), "alice") {
				t.Errorf("err = %v quotes the value", err)
			}
		})
	}
	// At the cap, and a valid integer, the value is used.
	if _, err := Join(user).Key(&MapSource{Ctx: ctxWith(long[1:])}); err != nil {
		t.Errorf("value at the cap: %v", err)
	}
	if k, err := Join(user.Integer()).Key(&MapSource{Ctx: ctxWith("007")}); err != nil || k != "7" {
		t.Errorf("integer user: %q, %v; want 7", k, err)
	}
	// The request's own values keep their input errors.
	_, err := Join(Param("id")).Key(&MapSource{Params: map[string]string{"id": long}})
	if !errors.Is(err, ErrTooLong) || !IsInputError(err) || errors.Is(err, ErrContextValue) {
		t.Errorf("overlong param: %v, want the input error ErrTooLong", err)
	}
	_, err = Join(Header("X-User").Integer()).Key(&MapSource{Header: map[string]string{"X-User": "alice"}})
	if !errors.Is(err, ErrInvalid) || !IsInputError(err) || errors.Is(err, ErrContextValue) {
		t.Errorf("non-integer header: %v, want the input error ErrInvalid", err)
	}
}
