//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

// proxied returns a dlock Client that reaches the lock server through p.
func (b *bank) proxied(p *proxy) *dlock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 2 * time.Second, DialTimeout: time.Second})
	b.t.Cleanup(func() { _ = rdb.Close() })
	return b.client(rdb)
}

// Fault 5: latency between the holders and Redis. Below a third of the lease nothing is lost;
// above it, renewals do not complete in time and holders are told they lost the lock rather
// than go on silently. Sections here last longer than the lease, so renewal is needed.
func TestFaultLatency(t *testing.T) {
	for _, ms := range []int{50, 400} {
		t.Run(fmt.Sprintf("%dms", ms), func(t *testing.T) {
			b := newBank(t)
			p := newProxy(t, b.lockSrv.Addr())
			p.add(fmt.Sprintf(`{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":%d,"jitter":%d}}`, ms, ms/5))
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			wait := b.run(ctx, b.proxied(p), 3, 1500*time.Millisecond)
			wait()
			var told int
			for _, s := range b.rec.Sections() {
				if s.SawLost {
					told++
				}
			}
			r := b.check(fmt.Sprintf("latency %d ms (+/-%d) client->Redis, lease %v", ms, ms/5, lease), time.Time{},
				fmt.Sprintf("holders_told_lost=%d", told))
			if ms < int(lease.Milliseconds())/3 && told > 0 {
				t.Errorf("%d holders told they lost the lock at %d ms latency", told, ms)
			}
			if ms > int(lease.Milliseconds())/3 && told == 0 {
				t.Errorf("no holder was told at %d ms latency: renewals cannot complete in time", ms)
			}
			_ = r
		})
	}
}

// Fault 6: connections killed while acquires and releases are in flight. No double ownership
// (the checker), no lock outlives its lease, and a release whose reply was lost is reported as
// such (ErrUnavailable), not as success.
func TestFaultConnectionsKilled(t *testing.T) {
	b := newBank(t)
	admin := b.lockSrv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wait := b.run(ctx, b.client(b.lockRDB), 6, 5*time.Millisecond)
	kills := 0
	for ctx.Err() == nil {
		time.Sleep(30 * time.Millisecond)
		n, _ := admin.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Result()
		m, _ := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
		kills += int(n + m)
	}
	wait()
	ambiguous := 0
	for _, s := range b.rec.Sections() {
		if s.ReleaseErr != "" {
			ambiguous++
		}
	}
	b.check("connections killed every 30 ms (CLIENT KILL)", time.Time{},
		fmt.Sprintf("connections_killed=%d ambiguous_releases_reported=%d", kills, ambiguous))
	// Whatever the kills left behind ends with its lease: a lock still held has at most a
	// lease left in Redis, and nothing renews it any more, so all are gone within a few
	// leases. (Not one lease to the millisecond: a call cut by a kill may land after the run,
	// go-redis retrying it, and its lock then ends a lease after that.)
	for _, k := range locktest.Held(t, admin) {
		if pttl := admin.PTTL(context.Background(), k).Val(); pttl == -1 || pttl > lease {
			t.Errorf("lock %s has %v left in Redis after the run, want a lease (%v) at most", k, pttl, lease)
		}
	}
	b.noKeyWithoutTTL()
	deadline := time.Now().Add(5 * lease)
	for keys := locktest.Held(t, admin); len(keys) != 0; keys = locktest.Held(t, admin) {
		if time.Now().After(deadline) {
			t.Fatalf("locks outlived their lease: %v held %v after the run", keys, 5*lease)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Fault 12: the holder is cut off from Redis (toxiproxy holds all its traffic). Its Done must
// fire before any rival obtains the lock, every time: the lease is checked on the holder's own
// clock, with a margin, not only against Redis replies.
func TestFaultHolderCutOff(t *testing.T) {
	b := newBank(t)
	rival := b.client(b.lockRDB)
	const runs = 20
	first := 0
	var margins []time.Duration
	for i := range runs {
		p := newProxy(t, b.lockSrv.Addr())
		holder := b.proxied(p)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		key := fmt.Sprintf("%s-%d", b.key, i)
		lk, err := holder.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+i*37%400) * time.Millisecond) // cut at varying points of the renewal cycle
		p.add(`{"name":"cut-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
		p.add(`{"name":"cut-down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
		got := make(chan time.Time, 1)
		go func() {
			l2, err := rival.Acquire(ctx, key)
			if err != nil {
				got <- time.Time{}
				return
			}
			got <- time.Now()
			_ = l2.Release(context.Background())
		}()
		var doneAt time.Time
		select {
		case <-lk.Done():
			doneAt = time.Now()
		case <-ctx.Done():
		}
		rivalAt := <-got
		if !doneAt.IsZero() && !rivalAt.IsZero() && doneAt.Before(rivalAt) {
			first++
			margins = append(margins, rivalAt.Sub(doneAt))
		} else {
			t.Errorf("run %d: holder told at %v, rival obtained at %v", i, doneAt, rivalAt)
		}
		cancel()
		p.clear()
	}
	minMargin := time.Duration(0)
	for i, m := range margins {
		if i == 0 || m < minMargin {
			minMargin = m
		}
	}
	t.Logf("RESULT | holder cut off from Redis (toxiproxy timeout) | holder_told_first=%d/%d min_margin=%v", first, runs, minMargin.Round(time.Millisecond))
}
