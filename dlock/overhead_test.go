package dlock

import (
	"context"
	"log/slog"
	"testing"
)

// nopBackend answers acquire and release at once, without a store: what is left is the
// Client's own work (owner id, lease, timers, watchdog entry, telemetry, contexts). Other
// methods are not implemented and panic if called.
type nopBackend struct{ backend }

func (nopBackend) acquire(ctx context.Context, r acquireRequest) (acquireResult, error) {
	return acquireResult{status: statusObtained, token: 1, pttl: r.ttl}, nil
}
func (nopBackend) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	return releaseResult{owned: true}, nil
}
func (nopBackend) bounded() bool                          { return true }
func (nopBackend) close() error                           { return nil }
func (nopBackend) listenReady(key, owner string) listener { return nil }

// BenchmarkClientOverhead: the CPU time and allocations of one Acquire+Release spent in the
// Client, not in Redis or go-redis.
func BenchmarkClientOverhead(b *testing.B) {
	cfg := config{lease: DefaultLease, retry: DefaultRetryInterval, prefix: DefaultPrefix}
	c := &Client{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	c.be = nopBackend{}
	c.tel = newTelemetry(&cfg)
	c.wd = newWatchdog(c)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lk, err := c.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	c.wd.close()
}
