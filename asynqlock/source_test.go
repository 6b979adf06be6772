package asynqlock_test

import (
	"testing"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// Task headers are found in any case, the exact name first; of headers that differ only in
// case, the first in byte order, in every run (a map's order is random).
func TestSourceHeaderLookup(t *testing.T) {
	task := asynq.NewTaskWithHeaders("t", nil, map[string]string{"X-Account": "a", "x-account": "b", "Tenant": "t1"})
	for _, tc := range []struct{ name, want string }{
		{"x-account", "b"}, // exact
		{"X-Account", "a"}, // exact
		{"X-ACCOUNT", "a"}, // "X-Account" < "x-account"
		{"tenant", "t1"},   // any case
	} {
		for range 50 {
			got, err := keyfunc.Join(keyfunc.Header(tc.name)).Key(asynqlock.NewSource(t.Context(), task))
			if err != nil || got != tc.want {
				t.Fatalf("header %q: %q, %v; want %q", tc.name, got, err, tc.want)
			}
		}
	}
}

// A nil task is refused by NewSource itself, with a message, not by a nil dereference at the
// Source's first use.
func TestNewSourcePanicsOnNilTask(t *testing.T) {
	const want = "asynqlock: NewSource with a nil *asynq.Task"
	func() {
		defer func() {
			if p, _ := recover().(string); p != want {
				t.Errorf("NewSource(ctx, nil) panicked with %q, want %q", p, want)
			}
		}()
		asynqlock.NewSource(t.Context(), nil)
	}()
}
