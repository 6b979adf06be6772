package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestQuantile(t *testing.T) {
	var s Sample
	for i := 1; i <= 100; i++ {
		s.Add(time.Duration(101-i) * time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, time.Millisecond},
		{0.5, 50 * time.Millisecond},
		{0.99, 99 * time.Millisecond},
		{1, 100 * time.Millisecond},
	} {
		if got := s.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	var empty Sample
	if empty.Quantile(0.5) != 0 || empty.Max() != 0 {
		t.Error("empty sample: want 0")
	}
}

// hooked returns a client on srv with a RoundTrips hook, its connection dialled already (so
// that no measurement includes the dial).
func hooked(t *testing.T, srv *redistest.Server) (*redis.Client, *RoundTrips) {
	t.Helper()
	rdb := srv.Client(t)
	rt := &RoundTrips{}
	rdb.AddHook(rt)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb, rt
}

// TestRoundTripsAgreeWithCommandStats checks the hook against the server's own counts: three
// single commands and one pipeline of two are 4 round trips and 5 requests.
func TestRoundTripsAgreeWithCommandStats(t *testing.T) {
	srv := redistest.Start(t)
	rdb, rt := hooked(t, srv)
	admin := srv.Client(t)
	ctx := context.Background()
	cs0, err := ReadCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	c0 := rt.Snapshot()
	rdb.Set(ctx, "a", "1", 0)
	rdb.Get(ctx, "a")
	rdb.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"a"})
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, "a")
		p.Del(ctx, "b")
		return nil
	})
	d := rt.Snapshot().Sub(c0)
	if d.RoundTrips != 4 || d.Requests != 5 {
		t.Errorf("hook counted %+v, want 4 round trips and 5 requests", d)
	}
	cs1, err := ReadCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	diff := cs1.Sub(cs0)
	if got := diff.Sum("set", "eval", "del"); got != 4 {
		t.Errorf("commandstats set+eval+del = %d, want 4", got)
	}
	if got := diff.Sum("get"); got != 2 { // one top-level, one inside the script
		t.Errorf("commandstats get = %d, want 2", got)
	}
}

// TestRoundTripsInside checks the time the hook sums inside calls: a BLPOP that waits 100 ms
// on an empty list is inside, the caller's sleeps around it are not.
func TestRoundTripsInside(t *testing.T) {
	rdb, rt := hooked(t, redistest.Start(t))
	ctx := context.Background()
	c0 := rt.Snapshot()
	start := time.Now()
	time.Sleep(50 * time.Millisecond)
	if err := rdb.BLPop(ctx, 100*time.Millisecond, "empty").Err(); err != redis.Nil {
		t.Fatalf("BLPOP: %v, want redis.Nil", err)
	}
	time.Sleep(50 * time.Millisecond)
	wall := time.Since(start)
	in := rt.Snapshot().Sub(c0).Inside
	if in < 100*time.Millisecond || in > wall-100*time.Millisecond {
		t.Errorf("inside %v over %v of wall time with 100 ms of sleep outside and a 100 ms BLPOP inside", in, wall)
	}
}

// TestRoundTripsCountedOnReturn checks that a command is counted when it returns: with a pool
// of one connection busy with a BLPOP, a GET waiting for that connection is not counted yet,
// and neither is the BLPOP still on the wire; both are once they have returned.
func TestRoundTripsCountedOnReturn(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.PoolSize = 1 })
	ctx := context.Background()
	var rt RoundTrips
	rdb.AddHook(&rt)
	if err := rdb.Ping(ctx).Err(); err != nil { // dial outside the measurement
		t.Fatal(err)
	}
	c0 := rt.Snapshot()
	done := make(chan struct{}, 2)
	go func() {
		rdb.BLPop(ctx, time.Second, "empty") // holds the only connection, then times out (redis.Nil)
		done <- struct{}{}
	}()
	waitFor(t, func() bool { return rdb.PoolStats().IdleConns == 0 && rdb.PoolStats().TotalConns == 1 })
	go func() {
		rdb.Get(ctx, "a") // waits for the connection
		done <- struct{}{}
	}()
	waitFor(t, func() bool { return rdb.PoolStats().PendingRequests == 1 })
	if d := rt.Snapshot().Sub(c0); d.RoundTrips != 0 || d.Requests != 0 {
		t.Errorf("while BLPOP is on the wire and GET waits for a connection: counted %+v, want nothing", d)
	}
	<-done
	<-done
	if d := rt.Snapshot().Sub(c0); d.RoundTrips != 2 || d.Requests != 2 {
		t.Errorf("after both returned: counted %+v, want 2 round trips and 2 requests", d)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 2s")
		}
	}
}

func TestParseServerCPU(t *testing.T) {
	got, err := parseServerCPU("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250001\r\nused_cpu_sys_children:9.000000\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := 1750001 * time.Microsecond; got != want {
		t.Errorf("parseServerCPU = %v, want %v", got, want)
	}
	if _, err := parseServerCPU("# CPU\r\nused_cpu_sys:1.5\r\n"); err == nil {
		t.Error("parseServerCPU without used_cpu_user: want an error")
	}
}

// TestServerCPUGrows checks that work sent to Redis shows in its CPU time, and that this
// process's CPU time grows while it works.
func TestServerCPUGrows(t *testing.T) {
	srv := redistest.Start(t)
	rdb, _ := hooked(t, srv)
	ctx := context.Background()
	s0, err := ReadServerCPU(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	p0 := ProcessCPU()
	for i := range 2000 {
		if err := rdb.Set(ctx, "cpu", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s1, err := ReadServerCPU(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if s1 <= s0 {
		t.Errorf("Redis CPU time went from %v to %v over 2000 SETs; want it to grow", s0, s1)
	}
	if p1 := ProcessCPU(); p1 <= p0 {
		t.Errorf("process CPU time went from %v to %v over 2000 SETs; want it to grow", p0, p1)
	}
}
