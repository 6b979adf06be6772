package keyfunc

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzKey feeds arbitrary request data through key functions using every part kind and
// checks that no input panics, every key stays within its bound and holds no brace, and
// two distinct inputs for the same parts never share a key.
func FuzzKey(f *testing.F) {
	f.Add("42", "a:b", `"k-1"`, []byte(`{"order":{"id":1e2},"items":[{"sku":"x"}]}`), 0)
	f.Add("", "", "", []byte(nil), 1)
	f.Add("{x}", "%3A", "\"a\\\"b\"", []byte("a=1&b=%zz"), 2)
	f.Add(strings.Repeat("é", 50), strings.Repeat(":", 300), strings.Repeat("k", 256), []byte(strings.Repeat("[", 70)), 3)
	f.Add("~", "#", "\x00", []byte(`{"order":{"id":"`+strings.Repeat("z", 5000)+`"}}`), 4)
	f.Add("xyz", "", "", []byte("--xyz\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--xyz--\r\n"), 5)

	limits := []int{MinKeyLen, 64, DefaultMaxKeyLen, 1000}
	funcs := []*Func{
		Join(Param("id"), Query("q").Optional(), IdempotencyKey().Optional(), JSON("order.id").Optional(),
			JSON("items.0.sku").Optional(), Form("a").Optional(), BodyHash(), Meta(MetaRoute).Optional(),
			ContextValue("user").Optional(), Header("X-Tenant").Optional()),
		MustTemplate("pay/{id}:{q}|{body}", map[string]Part{
			"id": Param("id").Optional(), "q": Query("q").Optional().HashAbove(0), "body": JSON("").Optional(),
		}).Scope(Header("X-Tenant").Optional(), Query("q").Optional()),
	}
	f.Fuzz(func(t *testing.T, param, query, header string, body []byte, sel int) {
		src := &MapSource{
			Ctx:     context.WithValue(context.Background(), "user", query),
			Params:  map[string]string{"id": param},
			Query:   map[string]string{"q": query},
			Header:  map[string]string{"Idempotency-Key": header, "X-Tenant": param + header},
			Meta:    map[string]string{MetaRoute: header},
			Payload: body,
		}
		if len(body) > 0 && body[0] == '-' { // a multipart body, its boundary the param
			src.Header["Content-Type"] = "multipart/form-data; boundary=" + param
		}
		sel = int(uint(sel) % uint(len(funcs)*len(limits)))
		fn := funcs[sel%len(funcs)].With(WithMaxKeyLen(limits[sel/len(funcs)]))
		limit := max(limits[sel/len(funcs)], MinKeyLen)
		key, err := fn.Key(src)
		if err != nil {
			if _, ok := err.(*PartError); !ok {
				t.Fatalf("error %v is %T, not *PartError", err, err)
			}
			return
		}
		if len(key) > limit {
			t.Fatalf("key of %d bytes over the bound %d", len(key), limit)
		}
		if strings.ContainsAny(key, "{} \t\r\n") {
			t.Fatalf("key %q holds a brace or whitespace", key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("key %q holds byte %#x", key, key[i])
			}
		}
		again, err := fn.Key(src)
		if err != nil || again != key {
			t.Fatalf("not deterministic: %q then %q (%v)", key, again, err)
		}
		// Swapping a value into another part must change the key unless the values agree.
		src.Params["id"], src.Query["q"] = query, param
		if swapped, err := fn.Key(src); err == nil && swapped == key && param != query {
			t.Fatalf("param %q and query %q swap to the same key %q", param, query, key)
		}
	})
}

// FuzzParseJSON checks that parseJSON, which builds a valid body with walkJSON, gives exactly
// what the json.Decoder path (decodeJSON) gives: the same tree, or the same error.
func FuzzParseJSON(f *testing.F) {
	for _, body := range append(jsonSamples, numberBodies()...) {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := parseJSON(body)
		if !utf8.Valid(body) || checkDepth(body, MaxJSONDepth) != nil {
			return
		}
		want, wantErr := decodeJSON(body)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: parseJSON = %#v, %v; the decoder gives %#v, %v", body, got, err, want, wantErr)
		}
	})
}

// jsonSamples, with numberBodies, seed FuzzParseJSON and TestWalkJSONAgreesWithDecoder.
var jsonSamples = []string{
	`{}`, `[]`, ` { } `, "\t[ ]\r\n", `0`, `-0`, `1e2`, `-1.5E-3`, `"x"`, `""`, `true`, `false`, `null`,
	`{"a":1,"b":[true,false,null,"s",-2.5e+3,{}],"c":{"d":{"e":[[]]}}}`,
	` { "a" : [ 1 , 2 ] , "b" : { } , "c" : "" } `,
	`{"order":{"id":"A-17","amount":1250,"items":[{"sku":"s1","qty":2}]}}`,
	`{"esc":"\"\\\/\b\f\n\r\t\u0000\u001f\u0041\u00e9\u20ac\ud83d\ude00\ufffd"}`,
	`{"\u0061":1,"b\n":2,"é":"ü","😀":"\uD83D\uDE00"}`,
	`{"a":"x\\"}`, `["\\\\", "\\u0041", "a\"b"]`,
	`{"a":1,"a":2}`, `{"a":{},"b":{"c":1,"c":2}}`, `{"a":1,"\u0061":2}`, `{"A":1,"a":2}`,
	`{"a":"\ud800"}`, `{"\udfff":1}`, `["\ud83d\n"]`, `"\ud800\u0041"`, `{"a":1,"a":"\ud800"}`, `{"\ud800":1,"\ud800":2}`,
	`{"a":`, `{"a":1}}`, `{"a":01}`, `[1,]`, `{"a" 1}`, `nul`, `"abc`, `{"a":"\x"}`, `{"a":1,"a":2,`, `{"a":"\ud800",`,
	`{"a":1} {}`, `1 2`, "{\"a\":\"\t\"}", `[1e]`, `{"a":-}`, `[.5]`,
}

func TestWalkJSONAgreesWithDecoder(t *testing.T) {
	for _, body := range append(jsonSamples, numberBodies()...) {
		got, err := parseJSON([]byte(body))
		want, wantErr := decodeJSON([]byte(body))
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: parseJSON = %#v, %v; the decoder gives %#v, %v", body, got, err, want, wantErr)
		}
	}
}
