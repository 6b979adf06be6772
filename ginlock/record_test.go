package ginlock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []*record{
		{status: 201, header: http.Header{"Content-Type": {"application/json"}, "Location": {"/p/1"}}, body: []byte(`{"id":1}`)},
		{status: 204, header: http.Header{}, body: nil},
		{status: 400, header: http.Header{"Set-Cookie": {"a=1", "b=2"}}, body: bytes.Repeat([]byte{0, 255}, 1000)},
		{status: 200, header: http.Header{"Vary": {"Accept-Language"}, "Content-Type": {"text/plain"}}, added: []string{"Vary"}, body: []byte("x")},
	} {
		r.fingerprint = sha256.Sum256(r.body)
		b := r.marshal()
		// Version 3 (which releases before version 4 read) unless headers were added to.
		if want := map[bool]byte{false: 3, true: 4}[len(r.added) > 0]; b[0] != want {
			t.Fatalf("%+v written as version %d, want %d", r, b[0], want)
		}
		got, err := unmarshalRecord(b)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.status != r.status || got.fingerprint != r.fingerprint || !reflect.DeepEqual(got.header, r.header) ||
			len(got.added) != len(r.added) || len(r.added) > 0 && !reflect.DeepEqual(got.added, r.added) || !bytes.Equal(got.body, r.body) {
			t.Fatalf("round trip %+v -> %+v", r, got)
		}
	}
}

func TestRecordRejectsGarbage(t *testing.T) {
	good := (&record{status: 200, header: http.Header{"A": {"b"}}, body: []byte("x")}).marshal()
	for _, b := range [][]byte{nil, {}, {2}, good[:10], good[:34], append([]byte{1}, bytes.Repeat([]byte{0xff}, 50)...)} {
		if _, err := unmarshalRecord(b); err == nil {
			t.Errorf("unmarshalRecord(%x) accepted garbage", b)
		}
	}
}

// FuzzRecord: no input panics the decoder, and what it accepts encodes back to itself.
func FuzzRecord(f *testing.F) {
	f.Add((&record{status: 201, header: http.Header{"Location": {"/x"}}, body: []byte("ok")}).marshal())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unmarshalRecord(b)
		if err != nil {
			return
		}
		again, err := unmarshalRecord(r.marshal())
		if err != nil || again.status != r.status || !bytes.Equal(again.body, r.body) || len(again.header) != len(r.header) ||
			len(again.added) != len(r.added) {
			t.Fatalf("re-encoding %x changed it: %+v -> %+v (%v)", b, r, again, err)
		}
	})
}

// A record stored by an earlier release is still within its retention after an upgrade or
// during a rolling deploy: the client's retry of exactly the same request gets the replay,
// not 422 (a client that treats 422 as "use a new key" would pay twice). Version 1
// fingerprints covered method, route and body; version 2 added the cleaned path and the
// query; version 3 has today's fingerprint, and is what a record without added headers is
// still written as (TestRecordRoundTrip).
func TestOlderRecordsReplay(t *testing.T) {
	const body = `{"amount":1}`
	bh, err := bodyHash.Key(&keyfunc.MapSource{Payload: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version byte
		fields  []string
	}{
		{1, []string{http.MethodPost, "/payments/:id", bh}},
		{2, []string{http.MethodPost, "/payments/:id", "/payments/7", "", bh}},
		{3, nil}, // the fingerprint as it is now
	} {
		t.Run(fmt.Sprintf("version %d", tc.version), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			locks := dlock.New(rdb)
			t.Cleanup(func() { _ = locks.Close() })

			r := gin.New()
			var runs atomic.Int32
			r.POST("/payments/:id", New(locks, keyfunc.Join(keyfunc.IdempotencyKey())), func(c *gin.Context) {
				runs.Add(1)
				c.JSON(http.StatusCreated, gin.H{"id": c.Param("id")})
			})
			send := func() *httptest.ResponseRecorder {
				q := httptest.NewRequest(http.MethodPost, "/payments/7", strings.NewReader(body))
				q.Header.Set(keyfunc.IdempotencyKeyHeader, "k-old")
				w := httptest.NewRecorder()
				r.ServeHTTP(w, q)
				return w
			}
			if w := send(); w.Code != http.StatusCreated {
				t.Fatalf("first: %d %s", w.Code, w.Body)
			}

			// Rewrite the stored record as the earlier release wrote it: its layout (no list
			// of added headers), its version, its fingerprint.
			ctx := context.Background()
			keys, err := rdb.Keys(ctx, "*:done").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("done keys %v, %v", keys, err)
			}
			raw, err := rdb.Get(ctx, keys[0]).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			rec, err := unmarshalRecord(raw)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fields != nil {
				h := sha256.New()
				for _, s := range tc.fields {
					h.Write(binary.AppendUvarint(nil, uint64(len(s))))
					h.Write([]byte(s))
				}
				h.Sum(rec.fingerprint[:0])
			}
			old := rec.marshal()
			if old[0] != 3 {
				t.Fatalf("a record without added headers written as version %d, want 3", old[0])
			}
			old[0] = tc.version
			if err := rdb.SetArgs(ctx, keys[0], old, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
				t.Fatal(err)
			}

			w := send()
			if w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" || runs.Load() != 1 ||
				w.Body.String() != `{"id":"7"}` {
				t.Fatalf("retry of a request stored by the earlier release: %d %s (replayed %q, runs %d); want the replay",
					w.Code, w.Body, w.Header().Get(ReplayedHeader), runs.Load())
			}
		})
	}
}

// TestSumFieldsLayout pins the fingerprint's input: each field preceded by its length as a
// uvarint. Stored records carry this sum, so it must not change between releases; fields over
// 127 bytes (two-byte lengths) and inputs longer than the stack buffer are covered.
func TestSumFieldsLayout(t *testing.T) {
	long := strings.Repeat("b", 300)
	for _, fields := range [][]string{
		{},
		{"POST", "/payments", ""},
		{"POST", "/payments", "/payments", "a=1", long},
	} {
		var in []byte
		for _, f := range fields {
			n := len(f)
			for n >= 0x80 {
				in = append(in, byte(n)|0x80)
				n >>= 7
			}
			in = append(in, byte(n))
			in = append(in, f...)
		}
		if got, want := sumFields(fields...), sha256.Sum256(in); got != want {
			t.Errorf("sumFields(%d fields) = %x, want %x", len(fields), got, want)
		}
	}
}
