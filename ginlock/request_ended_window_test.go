package ginlock_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/keyfunc"
)

// onAcquireStart runs hook when dlock starts its dlock.acquire span: the first thing
// dlock.Client.acquire does, after ginlock's own check of the request's context and before
// dlock's. It stands for the request's context ending in that window (a deadline that
// fires, a client that hangs up), which no test can otherwise time.
type onAcquireStart struct {
	hook atomic.Pointer[func(ctx context.Context)]
}

func (p *onAcquireStart) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if h := p.hook.Load(); h != nil && s.Name() == "dlock.acquire" {
		(*h)(parent)
	}
}
func (*onAcquireStart) OnEnd(sdktrace.ReadOnlySpan)      {}
func (*onAcquireStart) Shutdown(context.Context) error   { return nil }
func (*onAcquireStart) ForceFlush(context.Context) error { return nil }

// A request whose context ends after ginlock checked it, but before dlock looked at the lock,
// ended before its lock was tried as much as one that ended a moment earlier: dlock sends
// nothing and answers ErrNotObtained with the context's error, which without WithWait means
// the lock was never seen busy. It is answered 503 ErrRequestEnded and counted as canceled,
// not 409 "in progress" and busy.
func TestRequestEndedBeforeLookIs503(t *testing.T) {
	o := oteltest.New(t)
	hook := &onAcquireStart{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(hook))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := setup(t, dlock.WithTracerProvider(tp))
	r := router()
	var errs []error
	r.POST("/pay", ginlock.New(e.locks, keyfunc.Join(keyfunc.IdempotencyKey()),
		ginlock.WithTracerProvider(o.TP), ginlock.WithMeterProvider(o.MP),
		ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
			errs = append(errs, err)
			ginlock.DefaultErrorHandler(c, status, err)
		})), func(c *gin.Context) { c.String(http.StatusOK, "paid") })

	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		end  func(ctx context.Context, cancel context.CancelFunc)
		want error
	}{
		{"server deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 2*time.Second)
		}, func(ctx context.Context, _ context.CancelFunc) { <-ctx.Done() }, context.DeadlineExceeded},
		{"client gone", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, func(_ context.Context, cancel context.CancelFunc) { cancel() }, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs = nil
			ctx, cancel := tc.ctx()
			defer cancel()
			h := func(context.Context) { tc.end(ctx, cancel) }
			hook.hook.Store(&h)
			w := do(r, req{path: "/pay", key: idemKey(t), ctx: ctx})
			hook.hook.Store(nil)
			if ctx.Err() == nil {
				t.Fatal("precondition: the hook did not end the request's context")
			}
			if w.Code != http.StatusServiceUnavailable || len(errs) != 1 ||
				!errors.Is(errs[0], ginlock.ErrRequestEnded) || !errors.Is(errs[0], tc.want) {
				t.Errorf("answered %d %s, error handler got %v; want 503 with ErrRequestEnded wrapping %v",
					w.Code, w.Body, errs, tc.want)
			}
		})
	}
	want := map[string]int64{ginlock.OutcomeCanceled: 2}
	if got := o.CounterByAttr(t, "ginlock.requests", "ginlock.outcome"); got[ginlock.OutcomeBusy] != 0 ||
		got[ginlock.OutcomeCanceled] != want[ginlock.OutcomeCanceled] {
		t.Errorf("ginlock.requests by outcome %v, want %v (no busy: the lock was never looked at)", got, want)
	}
}
