package ginlock_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// A request without its Idempotency-Key is the client's mistake (400: outcome invalid, no
// failed span, nothing logged), whatever status a custom error handler chooses to answer it
// with: an API that answers every rejection of the middleware as 503 "try again later" has
// no key function that failed.
func TestInputErrorAnsweredAs5xxIsNotAKeyFunctionFailure(t *testing.T) {
	o := oteltest.New(t)
	e := setup(t)
	var logs strings.Builder
	everythingIs503 := ginlock.WithErrorHandler(func(c *gin.Context, _ int, err error) {
		c.Header("Retry-After", "1")
		ginlock.DefaultErrorHandler(c, http.StatusServiceUnavailable, err)
	})
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey, everythingIs503,
		ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP),
		ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))),
		func(c *gin.Context) { c.Status(http.StatusCreated) })
	if w := do(r, req{path: "/payments", body: `{}`, user: "alice"}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("precondition: status %d, want the error handler's 503", w.Code)
	}
	counts := o.CounterByAttr(t, "ginlock.requests", "ginlock.outcome")
	failedSpans := 0
	for _, s := range o.Spans.Ended() {
		if s.Status().Code == codes.Error {
			failedSpans++
		}
	}
	if counts[ginlock.OutcomeInvalid] != 1 || len(counts) != 1 || failedSpans != 0 || logs.Len() != 0 {
		t.Errorf("missing Idempotency-Key answered 503 by the error handler: outcomes %v, %d failed spans, log %q; want one %q, no failed span, nothing logged",
			counts, failedSpans, logs.String(), ginlock.OutcomeInvalid)
	}
}
