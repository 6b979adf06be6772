package shop_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// An Idempotency-Key sent on two header lines is 400 invalid_idempotency_key in both modes,
// in the shop's error shape, and charges nothing: requireIdempotencyKey read only the first
// line, so the unprotected shop charged and the protected one answered ginlock's problem+json;
// with an empty first line it answered missing_idempotency_key, though a key was sent.
func TestTwoIdempotencyKeyLines(t *testing.T) {
	modes(t, func(t *testing.T, protected bool) {
		e := newEnv(t, protected, time.Millisecond)
		a := e.account("alice", 10_000)
		for _, lines := range [][]string{{"first", "second"}, {"", "k-1"}} {
			o := e.order(a.ID, 2_500)
			req := httptest.NewRequestWithContext(context.Background(), "POST", "/api/orders/"+o.ID+"/pay", strings.NewReader(""))
			for _, l := range lines {
				req.Header.Add("Idempotency-Key", l)
			}
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, req)
			t.Logf("pay with Idempotency-Key lines %q: %d %s %s", lines, w.Code, w.Header().Get("Content-Type"), strings.TrimSpace(w.Body.String()))
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"error":"invalid_idempotency_key"`) {
				t.Errorf("lines %q: answered %d %s, want 400 {\"error\":\"invalid_idempotency_key\"}", lines, w.Code, w.Body)
			}
		}
		if n := len(e.ledger(a.ID)); n != 0 {
			t.Errorf("%d charge(s) booked for requests with two Idempotency-Key lines", n)
		}
	})
}
