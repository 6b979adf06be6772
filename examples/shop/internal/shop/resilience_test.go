package shop_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// TestRedisRestartMidPayCannotOverdraw: the protected shop's redis-server restarts
// (the embedded one runs with --save "" and no AOF, so it comes back empty) while a pay
// holds account:{id} in its provider call. A withdrawal of the same account then takes the
// lock at once, reads the same balance and both write: the account pays out more than it
// holds and its ledger no longer adds up. No pause past the lease is needed; dlock's
// watchdog only looks every lease/3 (10 s), and the shop passes no fencing token.
func TestRedisRestartMidPayCannotOverdraw(t *testing.T) {
	e, srv := newRedisEnv(t, 1500*time.Millisecond)
	a := e.account("alice", 3_000)
	o := e.order(a.ID, 2_500)

	payDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { payDone <- e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k1") }()
	time.Sleep(300 * time.Millisecond) // the pay holds both locks and waits for the provider
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var w *httptest.ResponseRecorder
	for range 20 { // the first commands after the restart may meet broken pool connections
		if w = e.do("POST", "/api/accounts/"+a.ID+"/withdraw", `{"amount":2500}`); w.Code != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	pay := <-payDone
	t.Logf("pay: %d %s; withdraw: %d %s", pay.Code, strings.TrimSpace(pay.Body.String()), w.Code, strings.TrimSpace(w.Body.String()))

	var acc shop.Account
	e.must(http.StatusOK, &acc, "GET", "/api/accounts/"+a.ID, "")
	l := e.ledger(a.ID)
	var out int64
	for _, en := range l {
		out -= en.Signed()
	}
	lj, _ := json.Marshal(l)
	t.Logf("balance %d, ledger %s", acc.Balance, lj)
	if out > 3_000 {
		t.Errorf("the account paid out %d cents from an opening balance of 3000 (overdrawn)", out)
	}
	if 3_000-out != acc.Balance {
		t.Errorf("ledger says balance %d, account says %d", 3_000-out, acc.Balance)
	}
	if pay.Code == http.StatusOK && w.Code == http.StatusOK {
		t.Errorf("both the pay and the withdrawal of 2500 from 3000 succeeded")
	}
	for _, r := range []*httptest.ResponseRecorder{pay, w} {
		if r.Code == http.StatusConflict && (!strings.Contains(r.Body.String(), "lock_lost") || r.Header().Get("Retry-After") == "") {
			t.Errorf("the refused write answered %d %s (Retry-After %q), want 409 lock_lost with Retry-After", r.Code, r.Body, r.Header().Get("Retry-After"))
		}
	}
}

// TestLostLockAnswers409: when the account lock is lost while pay runs (here its
// Redis key vanishes, as after a failover, and a 300 ms lease lets the watchdog notice),
// the handler's context ends and the shop answers 503 {"error":"unavailable"} without
// Retry-After. ginlock documents 409 with Retry-After: 1 for a lost lock ("a retry is
// safe to send"), and the shop's README lists no 503 for pay other than ginlock's
// problem+json one when Redis is down; the code "unavailable" is not in the README at all.
func TestLostLockAnswers409(t *testing.T) {
	e, srv := newRedisEnv(t, time.Second, dlock.WithLease(300*time.Millisecond))
	rdb := srv.Client(t)
	a := e.account("alice", 10_000)
	o := e.order(a.ID, 2_500)

	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(200 * time.Millisecond)
		_ = rdb.Del(t.Context(), "lockguard:{account:"+a.ID+"}:lock").Err()
	}()
	w := e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k")
	<-done
	t.Logf("pay whose account lock was lost: %d %q Retry-After=%q", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Retry-After"))
	if l := e.ledger(a.ID); len(l) != 0 {
		t.Fatalf("the write went through: %+v", l)
	}
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") == "" {
		t.Errorf("lost lock answered %d (Retry-After %q), want ginlock's documented 409 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestHealthzHidesRedisError: with Redis down, /healthz answers 503 with the
// go-redis error text (dial address and port of the Redis server) in its body, instead of
// the README's {"error":"code"} shape that every other error of the shop uses.
func TestHealthzHidesRedisError(t *testing.T) {
	e, srv := newRedisEnv(t, time.Millisecond)
	stopRedis(t, srv)
	w := e.do("GET", "/healthz", "")
	t.Logf("GET /healthz with Redis down: %d %s", w.Code, w.Body)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", w.Code)
	}
	if strings.Contains(w.Body.String(), srv.Addr()) || strings.Contains(w.Body.String(), "dial tcp") {
		t.Errorf("the answer holds the Redis error, address %s included", srv.Addr())
	}
}

// TestInvalidIdempotencyKeyContract: the README says errors are {"error":"code"} except
// ginlock's 409 (key in flight) and 503 (Redis down), that pay answers 400
// missing_idempotency_key for a missing key, and requireIdempotencyKey exists "so the
// unprotected shop keeps the same contract". Keys that pass the shop's own check (not
// blank) but that keyfunc rejects (over 255 bytes, non-ASCII, a lone quote) get an
// undocumented 400 application/problem+json from ginlock when protected, and a charge
// (200) when unprotected.
func TestInvalidIdempotencyKeyContract(t *testing.T) {
	keys := map[string]string{
		"256 bytes":   strings.Repeat("k", 256),
		"non-ASCII":   "clé-1",
		"lone quote":  `"`,
		"quoted, tab": "\"a\tb\"",
	}
	results := map[string]map[bool]string{}
	modes(t, func(t *testing.T, protected bool) {
		e := newEnv(t, protected, time.Millisecond)
		a := e.account("alice", 1_000_000)
		for name, key := range keys {
			o := e.order(a.ID, 100)
			w := e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", key)
			got := w.Header().Get("Content-Type") + " " + w.Body.String()
			if results[name] == nil {
				results[name] = map[bool]string{}
			}
			results[name][protected] = http.StatusText(w.Code) + " " + got
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"error":"invalid_idempotency_key"`) ||
				!strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
				t.Errorf("%s key: %d %s, want 400 {\"error\":\"invalid_idempotency_key\"}", name, w.Code, got)
			}
		}
	})
	for name, r := range results {
		if r[false][:6] != r[true][:6] {
			t.Errorf("%s key: unprotected %q, protected %q: the two modes answer differently", name, r[false], r[true])
		}
	}
}

// stopRedis stops srv for the rest of the test; it is restarted when the test ends, so the
// worker shuts down against a live Redis.
func stopRedis(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Restart() })
}

// newRedisEnv starts a protected shop and returns its redis-server too, so a test can stop
// or restart it; opts configure the dlock client.
func newRedisEnv(t *testing.T, latency time.Duration, opts ...dlock.Option) (*env, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return newEnvOn(t, srv, true, latency, opts...), srv
}

// A refund that the queue (Redis) cannot take is 503 unavailable with Retry-After, as the
// lock store's outage is on the other routes: temporary, not a fault of the shop.
func TestRefundWithRedisDownIs503(t *testing.T) {
	e, srv := newRedisEnv(t, time.Millisecond)
	acct := e.account("alice", 10_000)
	o := e.order(acct.ID, 2_500)
	if w := e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k-refund-down"); w.Code != http.StatusOK {
		t.Fatalf("pay: %d %s", w.Code, w.Body)
	}
	stopRedis(t, srv)
	w := e.do("POST", "/api/orders/"+o.ID+"/refund", "")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"unavailable"`) {
		t.Errorf("refund with Redis down: %d %s (Retry-After %q), want 503 unavailable with Retry-After 1",
			w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}

// TestHealthzDownSaysProtected: the page labels the shop "protected" or "unprotected" from
// /healthz. With Redis down the answer was {"status":"redis down"} alone, and the page
// labelled a protected shop "unprotected"; the 503 says which shop it is too.
func TestHealthzDownSaysProtected(t *testing.T) {
	e, srv := newRedisEnv(t, time.Millisecond)
	stopRedis(t, srv)
	w := e.do("GET", "/healthz", "")
	var got struct {
		Protected *bool `json:"protected"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("GET /healthz with Redis down: %d %s: %v", w.Code, w.Body, err)
	}
	if w.Code != http.StatusServiceUnavailable || got.Protected == nil || !*got.Protected {
		t.Errorf("GET /healthz of a protected shop with Redis down: %d %s, want 503 with \"protected\":true", w.Code, w.Body)
	}
}

// GET /api/queue with Redis down is 503 unavailable with Retry-After, as a refund is: it was
// 500 internal, logged as a fault of the shop.
func TestQueueWithRedisDownIs503(t *testing.T) {
	e, srv := newRedisEnv(t, time.Millisecond)
	stopRedis(t, srv)
	w := e.do("GET", "/api/queue", "")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"unavailable"`) {
		t.Errorf("queue with Redis down: %d %s (Retry-After %q), want 503 unavailable with Retry-After 1",
			w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}

// A withdrawal whose request ends while it runs (the client went away, or a shutdown's grace
// period ran out: the provider call is cut short) writes nothing and answers 503 unavailable
// with Retry-After: 1, as every 503 of the shop does: nothing was done, so a retry is safe.
func TestStoppedWithdrawalAnswers503RetryAfter(t *testing.T) {
	modes(t, func(t *testing.T, protected bool) {
		e := newEnv(t, protected, 2*time.Second)
		a := e.account("alice", 10_000)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, "POST", "/api/accounts/"+a.ID+"/withdraw", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"unavailable"`) {
			t.Errorf("withdrawal stopped while it ran: %d %s (Retry-After %q), want 503 unavailable with Retry-After 1",
				w.Code, w.Body, w.Header().Get("Retry-After"))
		}
		if l := e.ledger(a.ID); len(l) != 0 {
			t.Errorf("the stopped withdrawal wrote %+v", l)
		}
	})
}
