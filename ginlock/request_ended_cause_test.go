package ginlock_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// ErrRequestEnded matches both the request context's error and its cause: a server timeout
// set with a cause (context.WithTimeoutCause, WithDeadlineCause, WithCancelCause) ends the
// request with ctx.Err() == context.DeadlineExceeded, and an error handler may tell a server
// deadline from a client gone by errors.Is(err, context.DeadlineExceeded) / context.Canceled,
// or look for its own cause.
func TestRequestEndedMatchesContextErrAndCause(t *testing.T) {
	e := setup(t)
	r := router()
	var errs []error
	r.POST("/pay", func(c *gin.Context) {
		if ctx, ok := c.Request.Context().Value(ctxKey{}).(context.Context); ok {
			c.Request = c.Request.WithContext(ctx)
		}
	}, ginlock.New(e.locks, keyfunc.Join(keyfunc.IdempotencyKey()),
		ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
			errs = append(errs, err)
			ginlock.DefaultErrorHandler(c, status, err)
		})), func(c *gin.Context) { c.String(http.StatusOK, "paid") })

	budget, hungUp := errors.New("request budget spent"), errors.New("client hung up")
	expired, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), budget)
	defer cancel()
	gone, leave := context.WithCancelCause(context.Background())
	leave(hungUp)
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		want  error
		cause error
	}{
		{"deadline with cause", expired, context.DeadlineExceeded, budget},
		{"cancel with cause", gone, context.Canceled, hungUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs = nil
			w := do(r, req{path: "/pay", key: idemKey(t), ctx: context.WithValue(context.Background(), ctxKey{}, tc.ctx)})
			if w.Code != http.StatusServiceUnavailable || len(errs) != 1 || !errors.Is(errs[0], ginlock.ErrRequestEnded) {
				t.Fatalf("precondition: %d, %v", w.Code, errs)
			}
			if !errors.Is(errs[0], tc.want) || !errors.Is(errs[0], tc.cause) {
				t.Errorf("error %q: want it to match %v (the request's ctx.Err()) and its cause %v", errs[0], tc.want, tc.cause)
			}
		})
	}
}
