package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// A Refresh ttl below MinLease and a Complete retention that is not positive are the
// caller's mistake: the error matches ErrInvalidArgument (and nothing a caller retries or
// treats as a lost lock), keeps its text, and the call changes nothing: the hold stays
// held, the key locked, no record stored.
func TestInvalidArgumentRefreshComplete(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	for _, tc := range []struct {
		name, text string
		call       func(context.Context, *dlock.Lock) error
	}{
		{"Refresh zero", "ttl must be at least", func(ctx context.Context, lk *dlock.Lock) error { return lk.Refresh(ctx, 0) }},
		{"Refresh negative", "ttl must be at least", func(ctx context.Context, lk *dlock.Lock) error { return lk.Refresh(ctx, -time.Second) }},
		{"Refresh below MinLease", "ttl must be at least", func(ctx context.Context, lk *dlock.Lock) error {
			return lk.Refresh(ctx, dlock.MinLease-time.Nanosecond)
		}},
		{"Complete zero", "retention must be positive", func(ctx context.Context, lk *dlock.Lock) error {
			return lk.Complete(ctx, []byte("done"), 0)
		}},
		{"Complete negative", "retention must be positive", func(ctx context.Context, lk *dlock.Lock) error {
			return lk.Complete(ctx, []byte("done"), -time.Hour)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			lk, err := c.TryAcquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(ctx, lk)
			if !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Fatalf("error %v, want one matching ErrInvalidArgument", err)
			}
			for _, other := range []error{dlock.ErrNotHeld, dlock.ErrUnavailable, dlock.ErrInvalidKey} {
				if errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if !strings.HasPrefix(err.Error(), "dlock: ") || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error text %q, want it to start with \"dlock: \" and say %q", err, tc.text)
			}
			if err := lk.Err(); err != nil || lk.HoldCount() != 1 {
				t.Fatalf("after the refused call: Err %v, HoldCount %d; want the hold still held", err, lk.HoldCount())
			}
			if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
				t.Errorf("TryAcquire after the refused call: %v, want ErrNotObtained (key still locked)", err)
			}
			if _, ok, err := c.Completed(ctx, key); err != nil || ok {
				t.Errorf("Completed after the refused call: ok %v, err %v; want no record", ok, err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("Release after the refused call: %v", err)
			}
		})
	}
	// The bound itself is accepted. (A lease that short may run out before the answer on a
	// loaded machine: only the refusal is tested here.)
	lk, err := c.TryAcquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, dlock.MinLease); errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Refresh(MinLease): %v", err)
	}
	_ = lk.Release(ctx) // held or lost, as the machine's speed decides
}
