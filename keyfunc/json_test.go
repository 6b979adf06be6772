package keyfunc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonicalNumber(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"}, {"-0", "0"}, {"0.000", "0"}, {"0e10", "0"},
		{"100", "100"}, {"1e2", "100"}, {"1E+2", "100"}, {"100.0", "100"}, {"10e1", "100"},
		{"1.5", "1.5"}, {"15e-1", "1.5"}, {"1.50", "1.5"}, {"-1.5", "-1.5"},
		{"0.005", "0.005"}, {"5e-3", "0.005"}, {"5E-0003", "0.005"},
		{"123456789012345678901234567890", "123456789012345678901234567890"},
		{"1e63", "1" + strings.Repeat("0", 63)}, {"1e64", "1e64"},
		{"1e-64", "0." + strings.Repeat("0", 63) + "1"}, {"1e-65", "1e-65"},
		{"1.5e-70", "15e-71"}, {"-2e100", "-2e100"},
		{"1" + strings.Repeat("0", 70), "1e70"},
		{"9007199254740993", "9007199254740993"},
		{"1250", "1250"}, {"-1250", "-1250"}, {"7", "7"},
		{"1" + strings.Repeat("0", 63), "1" + strings.Repeat("0", 63)},
		{"1" + strings.Repeat("0", 64), "1e64"}, {"-1" + strings.Repeat("0", 64), "-1e64"},
		{strings.Repeat("9", 65), strings.Repeat("9", 65) + "e0"},
	}
	for _, tt := range tests {
		got, err := canonicalNumber(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("canonicalNumber(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := canonicalNumber("1e1234567890"); err == nil {
		t.Error("huge exponent accepted")
	}
	if got, _ := canonicalNumber("1e0000000000000000002"); got != "100" {
		t.Errorf("zero-padded exponent: %q", got)
	}
}

func TestJSONPaths(t *testing.T) {
	body := []byte(`{"a":{"b":[10,{"c":"deep"}]},"0":"zero-key","arr":["x","y"],"":{"":"empty"}}`)
	tests := []struct {
		path string
		want string // "" means missing
	}{
		{"a.b.0", "10"},
		{"a.b.1.c", "deep"},
		{"0", "zero-key"},
		{"arr.1", "y"},
		{"arr.01", ""},
		{"arr.-1", ""},
		{"arr.2", ""},
		{"arr.x", ""},
		{"a.b.0.c", ""},
		{".", "empty"},
		{"missing.path", ""},
		{"arr", "%5B%22x%22%2C%22y%22%5D"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			k, err := Join(JSON(tt.path).Optional()).Key(&MapSource{Payload: body})
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				want = missingMarker
			}
			if k != want {
				t.Errorf("Key = %q, want %q", k, want)
			}
		})
	}
}

func TestBodyHash(t *testing.T) {
	hash := func(body string) string {
		t.Helper()
		k, err := Join(BodyHash()).Key(&MapSource{Payload: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if len(k) != 43 {
			t.Fatalf("hash %q: %d chars, want 43", k, len(k))
		}
		return k
	}
	same := [][]string{
		{`{"a":1,"b":[true,null,"x"]}`, ` { "b" : [ true , null , "x" ] , "a" : 1.0 } `, `{"b":[true,null,"x"],"a":1e0}`},
		{"not json", "not json"},
		{"null", "null\n", " null ", "\tnull\r\n"}, // json.Encoder ends with a newline
		{`[1e400]`, `[10e399]`, `[0.1e401]`},       // past float64, in range: canonical
	}
	for _, group := range same {
		for _, b := range group[1:] {
			if hash(b) != hash(group[0]) {
				t.Errorf("%q and %q hash differently", b, group[0])
			}
		}
	}
	differ := []string{`{"a":1}`, `{"a":"1"}`, `{"a":2}`, `[1]`, `{"a":1} `, "", "not json", "not json ", `{"a":`, "null", "\f"}
	seen := map[string]string{}
	for _, b := range differ {
		h := hash(b)
		if prev, ok := seen[h]; ok && !(b == `{"a":1} ` && prev == `{"a":1}`) {
			t.Errorf("%q and %q hash alike", b, prev)
		}
		seen[h] = b
	}
	// A number out of range is refused by the JSON part that reads it; the body is hashed raw,
	// without an error, so two spellings of it are two fingerprints and nothing is merged.
	if hash(`[1e1000000000]`) == hash(`[10e999999999]`) {
		t.Error("two spellings of a number out of range hash alike")
	}
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	hash(deep) // too deep for JSON: hashed raw, no error

	// A repeated member is hashed raw: a Go handler reads the first body as EUR (the objects
	// merge into one struct field), so it must not share the second's fingerprint.
	if hash(`{"p":{"amount":100,"currency":"EUR"},"p":{"amount":100}}`) == hash(`{"p":{"amount":100}}`) {
		t.Error("a body with a repeated member hashes like the body its last member alone gives")
	}
}

// A body of whitespace that JSON does not allow (a form feed, a vertical tab, U+00A0, U+0085)
// is not an empty body: a JSON part fails with ErrMalformedBody, not ErrMissing.
func TestNonJSONWhitespaceBody(t *testing.T) {
	for _, body := range []string{"\f", "\v", "\u00a0", "\u0085", " \f\n"} {
		if _, err := Join(JSON("id")).Key(&MapSource{Payload: []byte(body)}); !errors.Is(err, ErrMalformedBody) {
			t.Errorf("body %q: %v, want ErrMalformedBody", body, err)
		}
	}
	for _, body := range []string{"", " \t\r\n"} {
		if _, err := Join(JSON("id")).Key(&MapSource{Payload: []byte(body)}); !errors.Is(err, ErrMissing) {
			t.Errorf("body %q: %v, want ErrMissing", body, err)
		}
	}
}

// encoding/json reads invalid UTF-8 as U+FFFD: two different bodies would share a key and a
// fingerprint. Such bodies are refused for JSON parts and hashed raw by BodyHash.
func TestInvalidUTF8Body(t *testing.T) {
	a, b := []byte("{\"order_id\":\"\xff\"}"), []byte("{\"order_id\":\"\xfe\"}")
	for _, body := range [][]byte{a, b} {
		_, err := Join(JSON("order_id")).Key(&MapSource{Payload: body})
		if !errors.Is(err, ErrMalformedBody) {
			t.Fatalf("JSON part of %q: %v, want ErrMalformedBody", body, err)
		}
	}
	ha, err := Join(BodyHash()).Key(&MapSource{Payload: a})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := Join(BodyHash()).Key(&MapSource{Payload: b})
	if err != nil {
		t.Fatal(err)
	}
	if ha == hb {
		t.Fatal("two bodies differing only in invalid bytes hash alike")
	}
}

// Member names match as encoding/json matches them to a handler's struct fields, ignoring
// case: the key names the order the handler acts on. Two members matching one segment are
// refused, since a struct would take the last and a map the exact one.
func TestJSONMemberCase(t *testing.T) {
	f := Join(JSON("order.order_id"))
	for _, tc := range []struct {
		body string
		want string
		err  error
	}{
		{`{"order":{"order_id":"2"}}`, "2", nil},
		{`{"ORDER":{"Order_ID":"2"}}`, "2", nil},
		{`{"order":{"order_id":"9","ORDER_ID":"2"}}`, "", ErrInvalid},
		{`{"order":{"order_id":"9"},"Order":{"order_id":"2"}}`, "", ErrInvalid},
		// One name twice: a struct takes the last scalar but merges repeated objects, a map
		// keeps the last: refused like names that differ in case.
		{`{"order":{"order_id":"9","order_id":"2"}}`, "", ErrInvalid},
		{`{"order":{"order_id":"2","note":"x"},"order":{"order_id":"2"}}`, "", ErrInvalid},
	} {
		var handler struct {
			Order struct {
				OrderID string `json:"order_id"`
			} `json:"order"`
		}
		if err := json.Unmarshal([]byte(tc.body), &handler); err != nil {
			t.Fatal(err)
		}
		got, err := f.Key(&MapSource{Payload: []byte(tc.body)})
		if !errors.Is(err, tc.err) || (err != nil) != (tc.err != nil) {
			t.Fatalf("%s: err = %v, want %v", tc.body, err, tc.err)
		}
		if err == nil && (got != tc.want || got != handler.Order.OrderID) {
			t.Errorf("%s: key %q, want %q (the handler acts on %q)", tc.body, got, tc.want, handler.Order.OrderID)
		}
	}
}

// Malformed bodies are reported by position, never by quoting their bytes.
func TestJSONErrorsQuoteNoBody(t *testing.T) {
	for body, secret := range map[string]string{`{"pin":12Q4}`: "Q", `{"pin":"12`: "12", `{"pin":1}}`: "}}"} {
		_, err := Join(JSON("pin")).Key(&MapSource{Payload: []byte(body)})
		if !errors.Is(err, ErrMalformedBody) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: %v; want ErrMalformedBody without %q", body, err, secret)
		}
	}
}

// The canonical body keeps no two members whose names differ only in case: a handler's
// struct takes the last of them, which sorted keys would hide. BodyHash then hashes the raw
// bytes, so the two orders are two requests. foldKey agrees with strings.EqualFold.
func TestCanonicalRefusesCaseVariantMembers(t *testing.T) {
	a, _ := Join(BodyHash()).Key(&MapSource{Payload: []byte(`{"amount":100,"Amount":5}`)})
	b, _ := Join(BodyHash()).Key(&MapSource{Payload: []byte(`{"Amount":5,"amount":100}`)})
	if a == b {
		t.Errorf("bodies a handler reads as 5 and as 100 share the body hash %q", a)
	}
	if _, err := Join(JSON("")).Key(&MapSource{Payload: []byte(`{"k":1,"\u212a":2}`)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("members k and the Kelvin sign (equal ignoring case): %v, want ErrInvalid", err)
	}
	for _, pair := range [][2]string{{"a", "A"}, {"k", "\u212a"}, {"s", "\u017f"}, {"ß", "ẞ"}, {"ab", "aB"}, {"a", "b"}, {"é", "É"}, {"Σ", "ς"}} {
		if got, want := foldKey(pair[0]) == foldKey(pair[1]), strings.EqualFold(pair[0], pair[1]); got != want {
			t.Errorf("foldKey(%q) == foldKey(%q) is %v, strings.EqualFold says %v", pair[0], pair[1], got, want)
		}
	}
}

// The common path of a JSON key: a small body and one or two selected fields, and the
// canonical body behind BodyHash (ginlock's replay fingerprint).
func BenchmarkJSON(b *testing.B) {
	body := []byte(`{"order":{"id":"A-17","amount":1250,"currency":"EUR","items":[{"sku":"s1","qty":2}]},"note":"gift"}`)
	for _, bc := range []struct {
		name string
		f    *Func
	}{
		{"OneField", Join(JSON("order.id"))},
		{"TwoFields", Join(JSON("order.id"), JSON("order.amount"))},
		{"BodyHash", Join(BodyHash())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			src := &MapSource{Payload: body}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.f.Key(src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// encoding/json reads a \u escape of a UTF-16 surrogate that is not half of a pair as U+FFFD,
// so "\ud800", "\udfff" and "\ufffd" would be one value: one lock and one body hash for
// requests a handler may tell apart. Such strings are refused with ErrInvalid wherever they
// are (value, member name, array element, top-level string); a pair still reads as its
// character, and U+FFFD itself, escaped or not, is text like any other.
func TestLoneSurrogate(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		part       Part
	}{
		{"high alone", `{"note":"\ud800"}`, JSON("note")},
		{"low alone", `{"note":"\udfff"}`, JSON("note")},
		{"inside text", `{"note":"a\uDBFFb"}`, JSON("note")},
		{"high then high", `{"note":"\ud800\ud800\udc00"}`, JSON("note")},
		{"low then high", `{"note":"\udc00\ud800"}`, JSON("note")},
		{"high then another escape", `{"note":"\ud800\u0041"}`, JSON("note")},
		{"high at the end of a pair's place", `{"note":"\ud83d\n"}`, JSON("note")},
		{"after an escaped backslash", `{"note":"\\\ud800"}`, JSON("note")},
		{"array element", `{"items":["ok","\udfff"]}`, JSON("items")},
		{"member name", `{"id":"1","\ud800":2}`, JSON("id")},
		{"elsewhere in the body", `{"id":"1","note":"\ud800"}`, JSON("id")},
		{"task payload field", `{"account_id":"\udfff"}`, JSON("account_id").Integer()},
		{"top-level string", `"\ud800"`, JSON("")},
		{"top-level string, optional", `"\ud800"`, JSON("").Optional()},
		{"optional field", `{"note":"\ud800"}`, JSON("note").Optional()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Join(tc.part.Named("field")).Key(&MapSource{Payload: []byte(tc.body)})
			var pe *PartError
			if !errors.Is(err, ErrInvalid) || !IsInputError(err) || !errors.As(err, &pe) || pe.Part != "field" {
				t.Fatalf("Key of %s = %q, %v; want a *PartError for field matching ErrInvalid", tc.body, k, err)
			}
			if msg := err.Error(); !strings.Contains(msg, `part "field"`) || !strings.Contains(msg, "surrogate") || strings.Contains(msg, `\ud`) {
				t.Errorf("message %q: want it to name the part and the surrogate, not quote the body", msg)
			}
		})
	}
	key := func(body string) string {
		t.Helper()
		k, err := Join(JSON("note")).Key(&MapSource{Payload: []byte(body)})
		if err != nil {
			t.Fatalf("Key of %s: %v", body, err)
		}
		return k
	}
	for _, same := range [][2]string{
		{`{"note":"\ud83d\ude00"}`, `{"note":"😀"}`},
		{`{"note":"\uD83D\uDE00"}`, `{"note":"😀"}`},
		{`{"note":"\ufffd"}`, "{\"note\":\"\uFFFD\"}"},
		{`{"note":"\ud800\udc00"}`, "{\"note\":\"\U00010000\"}"},
	} {
		if a, b := key(same[0]), key(same[1]); a != b {
			t.Errorf("%s and %s are one text but give %q and %q", same[0], same[1], a, b)
		}
	}
	if k := key(`{"note":"\\ud800"}`); k != "%5Cud800" { // a backslash, then text
		t.Errorf(`escaped backslash then "ud800": key %q`, k)
	}
	// BodyHash (ginlock's fingerprint) tells the three apart: the refused ones are hashed raw.
	seen := map[string]string{}
	for _, body := range []string{`{"a":"\ud800"}`, `{"a":"\udfff"}`, `{"a":"\ufffd"}`} {
		h, err := Join(BodyHash()).Key(&MapSource{Payload: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[h]; dup {
			t.Errorf("bodies %s and %s share the body hash %q", other, body, h)
		}
		seen[h] = body
	}
}

// A body that is not JSON stays malformed whatever its first string holds: an optional
// JSON part reads a form or text opening with a quoted lone surrogate as absent, as it reads
// any other such body; and a body cut short, or going wrong after a repeated member, is
// ErrMalformedBody, not the refusal of a body that parses.
func TestRefusalsOnlyForBodiesThatParse(t *testing.T) {
	for _, body := range []string{`"\ud800" is not JSON`, `"\udfff"x`, `"\ud800"&amount=5`} {
		k, err := Join(JSON("id").Optional()).Key(&MapSource{Payload: []byte(body)})
		if err != nil || k != missingMarker {
			t.Errorf("optional JSON part of the non-JSON body %s: %q, %v; want %q (absent)", body, k, err, missingMarker)
		}
	}
	for _, body := range []string{`{"a":"\ud800"`, `{"a":1,"a":2,`, `["\udfff",]`, `{"a":1,"a":2} x`} {
		_, err := Join(JSON("a")).Key(&MapSource{Payload: []byte(body)})
		if !errors.Is(err, ErrMalformedBody) || errors.Is(err, ErrInvalid) {
			t.Errorf("body %s: %v; want ErrMalformedBody only", body, err)
		}
	}
}

// loneSurrogate finds exactly the escapes encoding/json turns into U+FFFD: over every
// sequence of up to four pieces, a string is refused when, and only when, it decodes to more
// U+FFFD than its "\ufffd" escapes and U+FFFD characters account for.
func TestLoneSurrogateAgreesWithEncodingJSON(t *testing.T) {
	pieces := []string{`\ud800`, `\uDBFF`, `\udc00`, `\uDFFF`, `\ud83d`, `\ude00`, `\ufffd`, "\uFFFD", `\u0041`, `\\`, `\n`, `x`}
	var walk func(lit string, fffd, depth int)
	walk = func(lit string, fffd, depth int) {
		var s string
		if err := json.Unmarshal([]byte(`"`+lit+`"`), &s); err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		lone := strings.Count(s, "\uFFFD") > fffd
		if got := loneSurrogate([]byte(`"`+lit+`"`)) >= 0; got != lone {
			t.Fatalf("%s decodes to %+q: loneSurrogate says %v, want %v", lit, s, got, lone)
		}
		if depth == 4 {
			return
		}
		for _, p := range pieces {
			n := fffd
			if p == `\ufffd` || p == "\uFFFD" {
				n++
			}
			walk(lit+p, n, depth+1)
		}
	}
	walk("", 0, 0)
}

// The canonical body is hashed, so its strings must stay byte for byte what json.Marshal
// writes, HTML-safe escapes included, on the fast path for plain ASCII as on the other.
func TestAppendJSONStringMatchesMarshal(t *testing.T) {
	texts := []string{"", "plain", "A-17", "with space", "é", "\u2028", "\u2029", "\uFFFD", "😀", "a\x7fb"}
	for c := range 0x80 {
		texts = append(texts, string(rune(c)), "x"+string(rune(c))+"y")
	}
	for _, s := range texts {
		want, _ := json.Marshal(s)
		if got := appendJSONString([]byte("pre"), s); string(got) != "pre"+string(want) {
			t.Errorf("appendJSONString(%+q) = %s, json.Marshal gives %s", s, got[3:], want)
		}
	}
}
