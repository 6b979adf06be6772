package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// roundTrips counts client-to-server round trips (one per command, one per pipeline) and
// top-level requests (every command, also inside pipelines).
type roundTrips struct{ n, reqs atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		h.reqs.Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		h.reqs.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func benchSetup(b *testing.B, opts ...dlock.Option) (*redis.Client, *roundTrips, *dlock.Client) {
	srv := redistest.Start(b)
	rdb := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64 })
	rt := &roundTrips{}
	rdb.AddHook(rt)
	c := dlock.New(rdb, opts...)
	b.Cleanup(func() { _ = c.Close() })
	return rdb, rt, c
}

// BenchmarkAcquireRelease: one uncontended Acquire+Release. The floor is 2 round trips.
func BenchmarkAcquireRelease(b *testing.B) {
	rdb, rt, c := benchSetup(b)
	ctx := context.Background()
	key := "bench-uncontended"
	// Load the scripts first, so EVALSHA misses do not count.
	if lk, err := c.Acquire(ctx, key); err == nil {
		_ = lk.Release(ctx)
	}
	server := startServerTime(b, rdb)
	rt.n.Store(0) // after CONFIG RESETSTAT, which the hook counts too
	b.ResetTimer()
	for b.Loop() {
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/op")
	server.report(b, "evalsha", "eval")
}

// serverTime reads the Redis CPU time of top-level commands from INFO commandstats (a
// script's time includes the calls it makes), reset when the measurement starts.
type serverTime struct{ rdb *redis.Client }

func startServerTime(b *testing.B, rdb *redis.Client) serverTime {
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return serverTime{rdb: rdb}
}

// report adds the server microseconds per operation spent in the named commands.
func (s serverTime) report(b *testing.B, commands ...string) {
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec int64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_")), ":")
		if !ok || !slices.Contains(commands, name) {
			continue
		}
		for _, field := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				usec += n
			}
		}
	}
	b.ReportMetric(float64(usec)/float64(b.N), "server-us/op")
}

// BenchmarkAcquireReleaseRequestContext is BenchmarkAcquireRelease with a cancellable
// context, as an HTTP request or a task carries.
func BenchmarkAcquireReleaseRequestContext(b *testing.B) {
	for _, cte := range []bool{false, true} {
		b.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", cte), func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = cte })
			c := dlock.New(rdb)
			b.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for b.Loop() {
				lk, err := c.Acquire(ctx, "bench-request")
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBareSetNXDel is the floor of BenchmarkAcquireRelease: SET NX PX then DEL.
func BenchmarkBareSetNXDel(b *testing.B) {
	rdb, _, _ := benchSetup(b)
	ctx := context.Background()
	server := startServerTime(b, rdb)
	for b.Loop() {
		if err := rdb.SetNX(ctx, "bench-bare", "x", 30*time.Second).Err(); err != nil {
			b.Fatal(err)
		}
		if err := rdb.Del(ctx, "bench-bare").Err(); err != nil {
			b.Fatal(err)
		}
	}
	server.report(b, "set", "del")
}

// BenchmarkContended: 8 goroutines on one key, 100 us critical section. Reports throughput,
// the hand-off gap (release by one holder to acquisition by the next) and the worst wait.
func BenchmarkContended(b *testing.B) {
	for _, hold := range []time.Duration{100 * time.Microsecond, 0} {
		b.Run(fmt.Sprintf("g8-hold%v", hold), func(b *testing.B) { benchContended(b, 8, hold) })
	}
}

func benchContended(b *testing.B, workers int, hold time.Duration) {
	_, _, c := benchSetup(b)
	ctx := context.Background()
	key := fmt.Sprintf("bench-contended-%d", time.Now().UnixNano())
	var (
		mu          sync.Mutex
		waits, gaps []time.Duration
		lastRelease time.Time
		lastHolder  = -1
		next        atomic.Int64
		wg          sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				lk, err := c.Acquire(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				mu.Lock()
				waits = append(waits, got.Sub(t0))
				if lastHolder >= 0 && lastHolder != w {
					gaps = append(gaps, got.Sub(lastRelease))
				}
				mu.Unlock()
				spin(hold)
				mu.Lock()
				lastRelease, lastHolder = time.Now(), w
				mu.Unlock()
				if err := lk.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "acq/s")
	if len(gaps) > 0 {
		b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "handoff-p50-us")
	}
	if len(waits) > 0 {
		b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "wait-p99-us")
		b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "wait-max-us")
	}
}

// BenchmarkRenewal10k holds 10,000 locks for three leases and counts the round trips the
// watchdog spends per renewal period. One refresh per lock would be 10,000. Run it with
// -benchtime=1x.
func BenchmarkRenewal10k(b *testing.B) {
	const locks = 10000
	lease := 1500 * time.Millisecond
	_, rt, c := benchSetup(b, dlock.WithLease(lease))
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		held := make([]*dlock.Lock, 0, locks)
		for k := range locks {
			lk, err := c.TryAcquire(ctx, fmt.Sprintf("bench-renew-%d-%d", i, k))
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, lk)
		}
		before, reqsBefore := rt.n.Load(), rt.reqs.Load()
		time.Sleep(3 * lease)
		periods := float64(3 * lease / (lease / 3))
		perPeriod := float64(rt.n.Load()-before) / periods
		reqsPerPeriod := float64(rt.reqs.Load()-reqsBefore) / periods
		for _, lk := range held {
			if err := lk.Release(ctx); err != nil {
				b.Fatalf("lock lost while held: %v", err)
			}
		}
		b.ReportMetric(perPeriod, "roundtrips/period")
		b.ReportMetric(reqsPerPeriod, "requests/period")
		b.ReportMetric(reqsPerPeriod/locks*100, "%-of-per-lock-requests")
	}
}
