package ginlock

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"reflect"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []*record{
		{status: 201, header: http.Header{"Content-Type": {"application/json"}, "Location": {"/p/1"}}, body: []byte(`{"id":1}`)},
		{status: 204, header: http.Header{}, body: nil},
		{status: 400, header: http.Header{"Set-Cookie": {"a=1", "b=2"}}, body: bytes.Repeat([]byte{0, 255}, 1000)},
	} {
		r.fingerprint = sha256.Sum256(r.body)
		got, err := unmarshalRecord(r.marshal())
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.status != r.status || got.fingerprint != r.fingerprint || !reflect.DeepEqual(got.header, r.header) ||
			!bytes.Equal(got.body, r.body) {
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
		if err != nil || again.status != r.status || !bytes.Equal(again.body, r.body) || len(again.header) != len(r.header) {
			t.Fatalf("re-encoding %x changed it: %+v -> %+v (%v)", b, r, again, err)
		}
	})
}
