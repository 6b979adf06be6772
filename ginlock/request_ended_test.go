package ginlock_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/keyfunc"
)

// A request whose context ended before the lock was tried (a deadline the server set, spent
// in the middleware before ginlock; or the client gone) learns nothing of the lock: it is
// answered 503 with Retry-After, not 409 "in progress" for a lock nobody holds; Redis is not
// called; it is counted as canceled, not as busy or as a failure; the handler does not run,
// and the key stays free.
func TestRequestEndedBeforeLockIs503(t *testing.T) {
	o := oteltest.New(t)
	e := setup(t)
	rt := &roundTrips{}
	e.rdb.AddHook(rt)
	r := router()
	var errs []error
	ran := 0
	// The context the test gives the request goes in after auth, as a timeout middleware
	// would set it; the deadline is spent before ginlock runs.
	r.POST("/pay", func(c *gin.Context) {
		if ctx, ok := c.Request.Context().Value(ctxKey{}).(context.Context); ok {
			c.Request = c.Request.WithContext(ctx)
		}
	}, ginlock.New(e.locks, keyfunc.Join(keyfunc.IdempotencyKey()),
		ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP),
		ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
			errs = append(errs, err)
			ginlock.DefaultErrorHandler(c, status, err)
		})), func(c *gin.Context) {
		ran++
		c.String(http.StatusOK, "paid")
	})

	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	gone, leave := context.WithCancel(context.Background())
	leave()
	key := idemKey(t)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"server deadline", expired, context.DeadlineExceeded},
		{"client gone", gone, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs = nil
			before := rt.n.Load()
			// The request's own context stays live up to ginlock's middleware: the ended
			// one is put in by the middleware before it.
			w := do(r, req{path: "/pay", key: key, ctx: context.WithValue(context.Background(), ctxKey{}, tc.ctx)})
			p := wantProblem(t, w, http.StatusServiceUnavailable)
			if w.Header().Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q, want 1", w.Header().Get("Retry-After"))
			}
			if !strings.Contains(p.Detail, "before its lock was tried") {
				t.Errorf("detail %q, want it to say the request ended before its lock was tried", p.Detail)
			}
			if len(errs) != 1 || !errors.Is(errs[0], ginlock.ErrRequestEnded) || !errors.Is(errs[0], tc.want) {
				t.Errorf("error handler got %v, want ErrRequestEnded wrapping %v", errs, tc.want)
			}
			if n := rt.n.Load() - before; n != 0 {
				t.Errorf("%d Redis round trips, want none", n)
			}
		})
	}
	if ran != 0 {
		t.Fatalf("handler ran %d times", ran)
	}
	// Nothing was left held or stored: the key's next request runs.
	if w := do(r, req{path: "/pay", key: key}); w.Code != http.StatusOK || w.Body.String() != "paid" || ran != 1 {
		t.Fatalf("next request: %d %q, handler ran %d times", w.Code, w.Body, ran)
	}

	// No span for the requests that never tried the lock.
	wantOutcomes(t, o, "obtained", map[string]int64{ginlock.OutcomeCanceled: 2, ginlock.OutcomeObtained: 1})
}

// ctxKey carries, in a request's context, the context a middleware puts in its place.
type ctxKey struct{}
