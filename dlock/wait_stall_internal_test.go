package dlock

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A wait whose last look is held up on our side past its deadline (a process stalled by GC
// or starved of CPU, here one connection's write held back) while Redis answers at once is a
// busy lock that ran out, not a silent store: the probe sent when the deadline passed gets
// its answer.
func TestStalledLookIsNotSilentStore(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var armed atomic.Bool
	tn := &testNet{stall: func(p []byte) time.Duration {
		if bytes.Contains(bytes.ToLower(p), []byte("evalsha")) && armed.CompareAndSwap(true, false) {
			return 600 * time.Millisecond
		}
		return 0
	}}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = tn.dial })
	c := New(rdb)
	defer func() { _ = c.Close() }()
	other := New(srv.Client(t))
	defer func() { _ = other.Close() }()
	key := "stalled-look:" + t.Name()
	held, err := other.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	if err := rdb.Ping(ctx).Err(); err != nil { // a connection for the probe besides the look's
		t.Fatal(err)
	}

	armed.Store(true)
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Acquire(wctx, key)
	wcancel()
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("wait whose look stalled on our side while Redis answers: %v; want ErrNotObtained and the deadline, not ErrUnavailable", err)
	}
}
