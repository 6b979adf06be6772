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

// TestRoundTripsAgreeWithCommandStats checks the hook against the server's own counts: three
// single commands and one pipeline of two are 4 round trips and 5 requests.
func TestRoundTripsAgreeWithCommandStats(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	admin := srv.Client(t)
	ctx := context.Background()
	var rt RoundTrips
	rdb.AddHook(&rt)
	if err := rdb.Ping(ctx).Err(); err != nil { // dial outside the measurement
		t.Fatal(err)
	}
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
