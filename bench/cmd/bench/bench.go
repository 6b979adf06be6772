package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/bench/internal/metrics"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// poolSize is the connection pool of every client, large enough that no scenario (at most 64
// goroutines, plus renewal loops) waits for a pooled connection.
const poolSize = 128

// bench holds what all scenarios share: the server, an admin client for INFO and PING, and the
// PING samples taken between scenarios (back to back, with the process otherwise idle; shown
// for comparison only: the run's round trip is the PING interleaved with the uncontended rounds).
type bench struct {
	srv   *redistest.Server
	plan  plan
	admin *redis.Client
	pings metrics.Sample
}

func newBench(ctx context.Context, srv *redistest.Server, p plan) (*bench, error) {
	b := &bench{srv: srv, plan: p, admin: redis.NewClient(srv.Options())}
	if err := b.admin.Ping(ctx).Err(); err != nil {
		_ = b.admin.Close()
		return nil, fmt.Errorf("ping: %w", err)
	}
	return b, nil
}

func (b *bench) close() { _ = b.admin.Close() }

// client is a fresh go-redis client with a round-trip counting hook.
type client struct {
	*redis.Client
	rt *metrics.RoundTrips
}

func (b *bench) newClient() client {
	opt := b.srv.Options()
	opt.PoolSize = poolSize
	opt.ContextTimeoutEnabled = true
	c := client{Client: redis.NewClient(opt), rt: &metrics.RoundTrips{}}
	c.AddHook(c.rt)
	return c
}

// contender is a contender on its own fresh client; stop closes both.
type contender struct {
	contenders.Contender
	c client
}

func (b *bench) contender(name string, cfg contenders.Config) *contender {
	c := b.newClient()
	return &contender{Contender: contenders.New(name, c.Client, cfg), c: c}
}

func (c *contender) stop() {
	_ = c.Close()
	_ = c.c.Close()
}

// rotate returns names rotated left by i, so that successive rounds start with a different
// contender.
func rotate(names []string, i int) []string {
	i %= len(names)
	return append(append([]string(nil), names[i:]...), names[:i]...)
}

// pingCheck adds PING round trips (back to back, one connection, nothing else running) to the
// between-scenarios sample.
func (b *bench) pingCheck(ctx context.Context) {
	for range b.plan.pingsPerCheck {
		t := time.Now()
		if err := b.admin.Ping(ctx).Err(); err != nil {
			return
		}
		b.pings.Add(time.Since(t))
	}
}

// warmUpRounds is how many times warmUp starts its goroutines together.
const warmUpRounds = 5

// warmUp has workers goroutines Acquire and Release keys of their own (prefix + index), all
// starting together, warmUpRounds times: the contender's pool dials the connections that this
// many concurrent callers use and its scripts are loaded before anything is timed. It returns
// the pool's connections afterwards.
func warmUp(ctx context.Context, ct *contender, workers int, prefix string) (int, error) {
	for range warmUpRounds {
		start := make(chan struct{})
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				<-start
				lk, err := ct.Acquire(ctx, fmt.Sprintf("%s%d", prefix, i))
				if err == nil {
					err = lk.Release(ctx)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return 0, fmt.Errorf("%s warm-up: %w", ct.Name(), err)
		}
	}
	return int(ct.c.PoolStats().TotalConns), nil
}

func (b *bench) commandStats(ctx context.Context) metrics.CommandStats {
	cs, err := metrics.ReadCommandStats(ctx, b.admin)
	if err != nil {
		return nil
	}
	return cs
}

// machine describes where the run happens.
type machine struct {
	cpu          string
	cores        int
	goVersion    string
	redisVersion string
	date         time.Time
	loadStart    string
	loadEnd      string
}

func (b *bench) machine(ctx context.Context) (machine, error) {
	m := machine{cores: runtime.NumCPU(), goVersion: runtime.Version(), date: time.Now().UTC(), loadStart: loadAvg()}
	m.cpu = "unknown"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	info, err := b.admin.Info(ctx, "server").Result()
	if err != nil {
		return m, fmt.Errorf("info server: %w", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			m.redisVersion = v
		}
	}
	return m, nil
}

// loadAvg returns the 1, 5 and 15 minute load averages, or "unknown".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// spin busy-waits for d: a critical section that keeps its CPU, like real work would.
func spin(d time.Duration) {
	if d <= 0 {
		return
	}
	for start := time.Now(); time.Since(start) < d; {
	}
}

// settings describes each contender's configuration in the scenarios that use the defaults.
func settings(b *bench) map[string]string {
	m := map[string]string{}
	for _, name := range contenders.Names {
		ct := b.contender(name, contenders.Config{})
		m[name] = ct.Settings()
		ct.stop()
	}
	return m
}
