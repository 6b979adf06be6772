package keyfunc

import (
	"bytes"
	"errors"
	"mime/multipart"
	"net/http/httptest"
	"net/textproto"
	"testing"
)

// formPart is one part of a multipart/form-data body.
type formPart struct {
	name, filename, contentType, content string
	header                               map[string]string // other part headers
}

// multipartBody encodes parts with the given boundary (a random one when empty, as
// multipart.Writer, browsers and curl -F pick one for each encoding).
func multipartBody(t *testing.T, boundary string, parts ...formPart) (contentType string, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	if boundary != "" {
		if err := w.SetBoundary(boundary); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := `form-data; name="` + p.name + `"`
		if p.filename != "" {
			disp += `; filename="` + p.filename + `"`
		}
		h.Set("Content-Disposition", disp)
		if p.contentType != "" {
			h.Set("Content-Type", p.contentType)
		}
		for k, v := range p.header {
			h.Set(k, v)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pw.Write([]byte(p.content))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), buf.Bytes()
}

func bodyKey(t *testing.T, contentType string, body []byte) string {
	t.Helper()
	k, err := Join(BodyHash()).Key(&MapSource{Header: map[string]string{"Content-Type": contentType}, Payload: body})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A multipart/form-data body is hashed by its parts, not its bytes: the same form encoded
// again with another boundary (a client's retry) has the same hash, and any change to a
// part's name, file name, content type, content or place gives another.
func TestBodyHashMultipart(t *testing.T) {
	receipt := formPart{name: "receipt", filename: "r.pdf", contentType: "application/pdf", content: "%PDF-1.7 ..."}
	amount := formPart{name: "amount", content: "100"}
	ct1, b1 := multipartBody(t, "", amount, receipt)
	ct2, b2 := multipartBody(t, "", amount, receipt)
	if bytes.Equal(b1, b2) {
		t.Fatal("two encodings with the same bytes; the test needs different boundaries")
	}
	base := bodyKey(t, ct1, b1)
	if got := bodyKey(t, ct2, b2); got != base {
		t.Errorf("same form, another boundary: %s, want %s", got, base)
	}
	for name, parts := range map[string][]formPart{
		"another value":        {{name: "amount", content: "101"}, receipt},
		"another field name":   {{name: "amount2", content: "100"}, receipt},
		"another file name":    {amount, {name: "receipt", filename: "s.pdf", contentType: "application/pdf", content: "%PDF-1.7 ..."}},
		"another content type": {amount, {name: "receipt", filename: "r.pdf", contentType: "application/octet-stream", content: "%PDF-1.7 ..."}},
		"another file content": {amount, {name: "receipt", filename: "r.pdf", contentType: "application/pdf", content: "%PDF-1.7 .."}},
		"another part header": {amount, {name: "receipt", filename: "r.pdf", contentType: "application/pdf", content: "%PDF-1.7 ...",
			header: map[string]string{"Content-Transfer-Encoding": "base64"}}},
		"parts swapped":      {receipt, amount},
		"a part less":        {amount},
		"value split in two": {{name: "amount", content: "10"}, {name: "amount", content: "0"}, receipt},
	} {
		ct, b := multipartBody(t, "", parts...)
		if bodyKey(t, ct, b) == base {
			t.Errorf("%s: same hash as the original form", name)
		}
	}

	// Quoted-printable content is what a handler reads decoded: the same as sent plain.
	qp := formPart{name: "note", content: "caf=C3=A9", header: map[string]string{"Content-Transfer-Encoding": "quoted-printable"}}
	plain := formPart{name: "note", content: "café"}
	ctQ, bQ := multipartBody(t, "", qp)
	ctP, bP := multipartBody(t, "", plain)
	if bodyKey(t, ctQ, bQ) != bodyKey(t, ctP, bP) {
		t.Error("a quoted-printable part and the same text sent plain hash differently")
	}

	// Not named multipart/form-data with a boundary, or not parsing as one: hashed raw, no error.
	ctA, bA := multipartBody(t, "boundaryA", amount)
	raw := bodyKey(t, "application/octet-stream", bA)
	if bodyKey(t, ctA, bA) == raw {
		t.Error("a multipart body hashes like the same bytes sent as octet-stream")
	}
	if got := bodyKey(t, "multipart/form-data; boundary=other", bA); got != raw {
		t.Errorf("a body whose boundary is not the declared one: %s, want the raw hash %s", got, raw)
	}
	cut := bA[:len(bA)-10]
	if got, want := bodyKey(t, ctA, cut), bodyKey(t, "application/octet-stream", cut); got != want {
		t.Errorf("a cut multipart body: %s, want the raw hash %s", got, want)
	}
}

// Without an adapter that serves KindForm, Form reads a multipart/form-data body itself, as
// ParseMultipartForm reads it for c.PostForm: the first part of that name that is not a
// file. Before, the field read as absent and Form fell back to the query, so ?account=1 and
// ?account=3 with the same body (account=2, which c.PostForm debits) took two locks.
func TestFormReadsMultipartBody(t *testing.T) {
	ct, body := multipartBody(t, "", formPart{name: "account", filename: "a.txt", content: "9"},
		formPart{name: "note", content: "x"}, formPart{name: "account", content: "2"}, formPart{name: "account", content: "5"})
	src := func(query map[string]string, ct string, body []byte) *MapSource {
		return &MapSource{Query: query, Payload: body,
			Header: map[string]string{"Content-Type": ct}, Meta: map[string]string{MetaMethod: "POST"}}
	}
	f := Join(Form("account"))

	// What a handler reads.
	rq := httptest.NewRequest("POST", "/pay", bytes.NewReader(body))
	rq.Header.Set("Content-Type", ct)
	if err := rq.ParseMultipartForm(1 << 20); err != nil {
		t.Fatal(err)
	}
	want := rq.PostFormValue("account")

	got, err := f.Key(src(nil, ct, body))
	if err != nil || got != want {
		t.Fatalf("multipart body: key %q, %v; want %q, the value the handler reads", got, err, want)
	}
	if got, err := f.Key(src(map[string]string{"account": "2"}, ct, body)); err != nil || got != want {
		t.Fatalf("same value in the query: key %q, %v; want %q", got, err, want)
	}
	for _, q := range []string{"1", "3"} {
		if got, err := f.Key(src(map[string]string{"account": q}, ct, body)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("?account=%s with account=2 in the body: key %q, %v; want ErrInvalid (handlers differ in which they read)", q, got, err)
		}
	}
	_, noField := multipartBody(t, "b0undary", formPart{name: "note", content: "x"})
	if got, err := f.Key(src(map[string]string{"account": "7"}, "multipart/form-data; boundary=b0undary", noField)); err != nil || got != "7" {
		t.Fatalf("field only in the query: key %q, %v; want 7", got, err)
	}
	for name, tc := range map[string]struct {
		ct   string
		body []byte
	}{
		"no boundary":   {"multipart/form-data", body},
		"cut short":     {ct, body[:len(body)-20]},
		"not multipart": {ct, []byte("account=2")},
	} {
		if got, err := f.Key(src(nil, tc.ct, tc.body)); !errors.Is(err, ErrMalformedBody) {
			t.Errorf("%s: key %q, %v; want ErrMalformedBody", name, got, err)
		}
	}
	// An adapter that serves the form answers for it.
	served := src(nil, ct, body)
	served.Form = map[string]string{"account": "4"}
	if got, err := f.Key(served); err != nil || got != "4" {
		t.Fatalf("adapter's form value: key %q, %v; want 4", got, err)
	}
}
