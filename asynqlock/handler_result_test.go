package asynqlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// A handler that returns asynq.RevokeTask, wrapped or not, drops its task on purpose ("this
// refund was already issued"): asynq neither retries nor archives it, so the asynqlock.lock
// span is no failure and says revoked in an attribute. asynq.SkipRetry archives the task as
// failed for good, and the span, which covers the handler that gave up, stays an error.
func TestHandlerRevokeIsNoSpanError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		herr    error
		state   string // what finalState reports: revoked tasks are gone
		failure bool
	}{
		{"RevokeTask", asynq.RevokeTask, "gone", false},
		{"wrapped RevokeTask", fmt.Errorf("refund already issued: %w", asynq.RevokeTask), "gone", false},
		{"SkipRetry", fmt.Errorf("refund refused by the provider: %w", asynq.SkipRetry), "archived", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := oteltest.New(t)
			e := newEnv(t)
			mux := asynq.NewServeMux()
			mux.Handle("account:deduct", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				return tc.herr
			}), e.lock, taskAccountKey, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP)))
			e.startServer(t, serverConfig(1), mux)

			info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":"rv1"}`)),
				asynq.MaxRetry(3), asynq.Retention(time.Minute))
			// The span ends before the handler's result reaches asynq, so it is there once
			// the task is gone or archived.
			if state, _ := finalState(t, e.inspector(t), info, 20*time.Second); state != tc.state {
				t.Fatalf("task %s, want %s: the test does not exercise what it claims", state, tc.state)
			}
			ended := o.Spans.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d asynqlock.lock spans ended, want 1", len(ended))
			}
			s := ended[0]
			if out := oteltest.Attr(s, "asynqlock.outcome"); out != asynqlock.OutcomeObtained {
				t.Errorf("span outcome %q, want %q: the lock was taken and the handler ran", out, asynqlock.OutcomeObtained)
			}
			if failed := s.Status().Code == codes.Error; failed != tc.failure {
				t.Errorf("handler returned %v: span status %v %q, want an error status: %v", tc.herr, s.Status().Code, s.Status().Description, tc.failure)
			}
			wantRevoked := ""
			if !tc.failure {
				wantRevoked = "true"
			}
			if got := oteltest.Attr(s, "asynqlock.revoked"); got != wantRevoked {
				t.Errorf("span attribute asynqlock.revoked %q, want %q", got, wantRevoked)
			}
		})
	}
}
