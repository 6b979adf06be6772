package keyfunc

import (
	"context"
	"strings"
	"testing"
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
