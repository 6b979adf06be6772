package ginlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/keyfunc"
)

// Redis paused while a request waits: ginlock answers 503 and marks ginlock.lock as failed,
// and its child dlock.acquire agrees (outcome error, not a timeout on a busy lock).
func TestTelemetrySilentStoreFailsBothSpans(t *testing.T) {
	o := oteltest.New(t)
	e := setup(t, dlock.WithTracerProvider(o.TP), dlock.WithMeterProvider(o.MP))
	r := router()
	r.POST("/accounts/:id", ginlock.New(e.locks, accountKey, ginlock.WithWait(500*time.Millisecond),
		ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP)), func(c *gin.Context) { c.Status(http.StatusOK) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Pause(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	w := do(r, req{path: "/accounts/zz1"})
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("precondition: status %d, want 503", w.Code)
	}
	var gin_, dl sdktrace.ReadOnlySpan
	for _, s := range o.Spans.Ended() {
		switch s.Name() {
		case "ginlock.lock":
			gin_ = s
		case "dlock.acquire":
			dl = s
		}
	}
	if gin_ == nil || dl == nil {
		t.Fatalf("spans missing: %v %v", gin_, dl)
	}
	t.Logf("ginlock.lock: outcome=%s status=%v; dlock.acquire: outcome=%s status=%v",
		oteltest.Attr(gin_, "ginlock.outcome"), gin_.Status().Code, oteltest.Attr(dl, "dlock.outcome"), dl.Status().Code)
	if gin_.Status().Code != codes.Error || dl.Status().Code != codes.Error || oteltest.Attr(dl, "dlock.outcome") != dlock.OutcomeError {
		t.Errorf("store unavailable (503): ginlock.lock status %v, dlock.acquire outcome %q status %v; want both failed",
			gin_.Status().Code, oteltest.Attr(dl, "dlock.outcome"), dl.Status().Code)
	}
}

// A keyfunc.From function that fails is a 500: a ginlock.lock span marks the failure, without
// a key hash and without the function's error text (it may hold request data).
func TestTelemetryKeyFuncErrorSpan(t *testing.T) {
	o := oteltest.New(t)
	e := setup(t)
	key := keyfunc.Join(keyfunc.From("acct", func(keyfunc.Source) (string, error) { return "", errors.New("db down") }))
	r := router()
	r.POST("/x", ginlock.New(e.locks, key, ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP)),
		func(c *gin.Context) { c.Status(http.StatusOK) })
	if w := do(r, req{path: "/x"}); w.Code != http.StatusInternalServerError {
		t.Fatalf("precondition: %d", w.Code)
	}
	ended := o.Spans.Ended()
	if len(ended) != 1 || ended[0].Name() != "ginlock.lock" {
		t.Fatalf("%d spans ended, want one ginlock.lock", len(ended))
	}
	s := ended[0]
	if s.Status().Code != codes.Error || oteltest.Attr(s, "ginlock.outcome") != ginlock.OutcomeError {
		t.Errorf("span status %v, outcome %q; want codes.Error, %q", s.Status().Code, oteltest.Attr(s, "ginlock.outcome"), ginlock.OutcomeError)
	}
	if oteltest.Attr(s, "ginlock.key_hash") != "" {
		t.Error("a span without a key has a key hash")
	}
	if strings.Contains(s.Status().Description, "db down") {
		t.Errorf("the key function's error text is in the span: %q", s.Status().Description)
	}
	for _, ev := range s.Events() {
		for _, a := range ev.Attributes {
			if strings.Contains(a.Value.Emit(), "db down") {
				t.Errorf("the key function's error text is in span event %s", ev.Name)
			}
		}
	}
}

// A key function whose error the error handler answers below 500 (an order looked up for
// its account that does not exist: 404) is the request's fault, as a 400 is: counted as
// invalid, no failed span, nothing logged. So is one whose key function gave up because the
// request's context ended (counted as canceled). A 500 is still logged and marked.
func TestTelemetryKeyFuncErrorAnsweredAs404(t *testing.T) {
	errNoOrder := errors.New("no such order")
	key := keyfunc.Join(keyfunc.From("acct", func(src keyfunc.Source) (string, error) {
		if id, _ := src.Value(keyfunc.KindParam, "id"); id == "missing" {
			return "", errNoOrder
		}
		if err := src.Context().Err(); err != nil {
			return "", fmt.Errorf("order lookup: %w", err) // the request's context ended
		}
		return "", errors.New("db down")
	}))
	onError := ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
		if errors.Is(err, errNoOrder) {
			c.AbortWithStatusJSON(http.StatusNotFound, gin.H{"error": "order_not_found"})
			return
		}
		ginlock.DefaultErrorHandler(c, status, err)
	})
	for _, tc := range []struct {
		id      string
		status  int
		outcome string
		failed  bool
	}{
		{"missing", http.StatusNotFound, ginlock.OutcomeInvalid, false},
		{"other", http.StatusInternalServerError, ginlock.OutcomeError, true},
		{"gone", http.StatusInternalServerError, ginlock.OutcomeCanceled, false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			o := oteltest.New(t)
			e := setup(t)
			var logs strings.Builder
			r := router()
			r.POST("/orders/:id/pay", ginlock.New(e.locks, key, onError,
				ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP),
				ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))),
				func(c *gin.Context) { c.Status(http.StatusOK) })
			q := req{path: "/orders/" + tc.id + "/pay"}
			if tc.id == "gone" {
				gone, leave := context.WithCancel(context.Background())
				leave() // the client went away before the key function ran
				q.ctx = gone
			}
			if w := do(r, q); w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			counts := o.CounterByAttr(t, "ginlock.requests", "ginlock.outcome")
			if counts[tc.outcome] != 1 || len(counts) != 1 {
				t.Errorf("ginlock.requests by outcome %v, want one %q", counts, tc.outcome)
			}
			failedSpans := 0
			for _, s := range o.Spans.Ended() {
				if s.Status().Code == codes.Error {
					failedSpans++
				}
			}
			logged := strings.Contains(logs.String(), "level=ERROR")
			if (failedSpans == 1) != tc.failed || logged != tc.failed {
				t.Errorf("%d failed spans, error logged %v; want failure marked: %v (log %q)", failedSpans, logged, tc.failed, logs.String())
			}
		})
	}
}

// A key reading a path parameter the route does not declare is the server's mistake: the
// 500's span and log say so, naming the parameter and the route, not "key function failed".
func TestTelemetryUndeclaredParamSpan(t *testing.T) {
	o := oteltest.New(t)
	e := setup(t)
	var logs strings.Builder
	r := router()
	r.POST("/a/:account_id", ginlock.New(e.locks, keyfunc.Join(keyfunc.Param("id")), ginlock.WithoutReplay(),
		ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP),
		ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))),
		func(c *gin.Context) { c.Status(http.StatusOK) })
	if w := do(r, req{path: "/a/42"}); w.Code != http.StatusInternalServerError {
		t.Fatalf("precondition: %d", w.Code)
	}
	ended := o.Spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want one", len(ended))
	}
	desc := ended[0].Status().Description
	if ended[0].Status().Code != codes.Error || !strings.Contains(desc, ginlock.ErrUndeclaredParam.Error()) ||
		!strings.Contains(desc, `"id"`) || !strings.Contains(desc, "/a/:account_id") {
		t.Errorf("span status %v %q, want codes.Error naming the undeclared parameter and the route", ended[0].Status().Code, desc)
	}
	if strings.Contains(logs.String(), "key function failed") || !strings.Contains(logs.String(), ginlock.ErrUndeclaredParam.Error()) {
		t.Errorf("log %q, want the undeclared parameter's message", logs.String())
	}
}

// A waiter whose client went away (net/http cancels the request's context) is counted as
// canceled, not as busy: a wait that ran out (WithWait), or that a deadline the server set on
// the request ended, says the lock was contended. All answer 409.
func TestTelemetryClientGoneIsCanceledNotBusy(t *testing.T) {
	o := oteltest.New(t)
	e := setup(t)
	r := router()
	tel := []ginlock.Option{ginlock.WithWait(time.Minute), ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP)}
	started, release := blocking(r, e, "/accounts/:id/withdraw", tel...)
	r.POST("/accounts/:id/short", ginlock.New(e.locks, accountKey, ginlock.WithWait(100*time.Millisecond),
		ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP)), func(c *gin.Context) { c.Status(http.StatusOK) })
	done := make(chan int)
	go func() { done <- do(r, req{path: "/accounts/7/withdraw"}).Code }()
	<-started

	gone, leave := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, leave)
	wantProblem(t, do(r, req{path: "/accounts/7/withdraw", ctx: gone}), http.StatusConflict) // client gone
	deadline, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	wantProblem(t, do(r, req{path: "/accounts/7/withdraw", ctx: deadline}), http.StatusConflict) // server's deadline
	wantProblem(t, do(r, req{path: "/accounts/7/short"}), http.StatusConflict)                   // wait ran out
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("holder: %d", code)
	}

	wantOutcomes(t, o, "obtained,canceled,busy,busy",
		map[string]int64{ginlock.OutcomeCanceled: 1, ginlock.OutcomeBusy: 2, ginlock.OutcomeObtained: 1})
}

// wantOutcomes checks the outcomes of the ginlock.lock spans, in the order they ended, none
// marked failed, and the ginlock.requests counter by outcome.
func wantOutcomes(t *testing.T, o *oteltest.Recorder, spans string, counts map[string]int64) {
	t.Helper()
	var outcomes []string
	for _, s := range o.Spans.Ended() {
		if s.Name() == "ginlock.lock" {
			outcomes = append(outcomes, oteltest.Attr(s, "ginlock.outcome"))
			if s.Status().Code == codes.Error {
				t.Errorf("span %s marked failed: %v", oteltest.Attr(s, "ginlock.outcome"), s.Status())
			}
		}
	}
	if got := strings.Join(outcomes, ","); got != spans {
		t.Errorf("span outcomes %s, want %s", got, spans)
	}
	if got := o.CounterByAttr(t, "ginlock.requests", "ginlock.outcome"); !maps.Equal(got, counts) {
		t.Errorf("ginlock.requests by outcome %v, want %v", got, counts)
	}
}
