//go:build chaos

package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// Fault 1: a holder process is stopped past its lease, then continued. Another holder goes on;
// the stopped one learns it lost the lock, and its late write is rejected by fencing.
func TestFaultHolderPaused(t *testing.T) {
	b := newBank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	p := b.startProcess("paused", 150*time.Millisecond, 6*time.Second)
	wait := b.run(ctx, b.client(b.lockRDB), 2, 5*time.Millisecond)
	// Stop the process while it holds the lock: its HOLD line may be read after the section
	// ended (the section lasts 150 ms), so Redis, with the process stopped, must still have the
	// lock under that token; if not, let it go on and stop it in a later section.
	lockKey := "lockguard:{" + b.key + "}:lock"
	var token int64
	for {
		select {
		case token = <-p.holds:
		case <-ctx.Done():
			t.Fatal("the worker process was never stopped while it held the lock")
		}
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		f, err := b.lockRDB.HMGet(context.Background(), lockKey, "o", "t").Result()
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := f[0].(string); o != "" && f[1] == strconv.FormatInt(token, 10) {
			break // stopped inside the section of token
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	time.Sleep(3 * lease)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	heal := time.Now()
	<-p.done
	cancel()
	wait()
	r := b.check("holder paused 3x lease (SIGSTOP)", heal, "")
	var paused *Section
	for _, s := range b.rec.Sections() {
		if s.Token == token {
			paused = &s
		}
	}
	if paused == nil {
		t.Fatal("no record of the paused section")
	}
	if paused.Acked || !paused.Fenced || !paused.SawLost {
		t.Fatalf("paused holder: acked %v fenced %v saw_lost %v", paused.Acked, paused.Fenced, paused.SawLost)
	}
	if r.Lost == 0 {
		t.Fatal("the pause did not cost the lock: the test proved nothing")
	}
}

// Faults 2-4: the lock server restarted, flushed, or paused past the lease mid-run, with
// holders and queued waiters.
func TestFaultLockServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(b *bank) error
	}{
		{"redis restarted without persistence", func(b *bank) error { return b.lockSrv.Restart() }},
		{"FLUSHALL", func(b *bank) error { return b.lockSrv.Flush(context.Background()) }},
		{"CLIENT PAUSE 2x lease", func(b *bank) error {
			if err := b.lockSrv.Pause(context.Background(), 2*lease); err != nil {
				return err
			}
			time.Sleep(2 * lease)
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBank(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := b.run(ctx, b.client(b.lockRDB), 6, 20*time.Millisecond)
			b.waitWork(ctx, 20)
			if err := tc.fault(b); err != nil {
				t.Fatal(err)
			}
			heal := time.Now()
			runPastHeal(heal, cancel)
			wait()
			r := b.check(tc.name, heal, "")
			if r.FirstAckAfter == 0 || r.FirstAckAfter > resumeBound {
				t.Errorf("work resumed %v after the fault healed (0: not at all), want within %v", r.FirstAckAfter, resumeBound)
			}
			b.noKeyWithoutTTL()
		})
	}
}

// Fault 8: 1,000 waiters with random deadlines on one key: the line drains, no ghost entry is
// left, and no goroutine or subscription leaks (goleak in TestMain).
func TestThousandWaiters(t *testing.T) {
	b := newBank(t)
	// A burst of 1,000 first attempts: an ordinary client with a pool to match.
	c := b.client(b.lockSrv.Client(t, func(o *redis.Options) { o.PoolSize = 200 }))
	ctx := context.Background()
	holder, err := c.Acquire(ctx, b.key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg                sync.WaitGroup
		obtained, timeout sync.Map
	)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, time.Duration(10+rand.IntN(2000))*time.Millisecond)
			defer cancel()
			lk, err := c.Acquire(wctx, b.key)
			switch {
			case err == nil:
				obtained.Store(i, true)
				_ = lk.Release(ctx)
			case errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, context.DeadlineExceeded):
				timeout.Store(i, true)
			default:
				t.Error(err)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	_ = holder.Release(ctx)
	wg.Wait()
	n, m := 0, 0
	obtained.Range(func(any, any) bool { n++; return true })
	timeout.Range(func(any, any) bool { m++; return true })
	// Let the clean-ups of the timed-out waiters land, then the line must be empty.
	deadline := time.Now().Add(5 * time.Second)
	for {
		queued := b.lockRDB.ZCard(ctx, "lockguard:{"+b.key+"}:q").Val()
		chans := b.lockRDB.PubSubNumSub(ctx, "lockguard:{"+b.key+"}:ch").Val()["lockguard:{"+b.key+"}:ch"]
		if queued == 0 && chans == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the drain: %d queued, %d subscribers", queued, chans)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lk, err := c.TryAcquire(ctx, b.key)
	if err != nil {
		t.Fatalf("a ghost holds the lock after the drain: %v", err)
	}
	_ = lk.Release(ctx)
	t.Logf("RESULT | 1000 waiters, random deadlines 10ms-2s | obtained=%d timed_out=%d ghosts=0", n, m)
	if n+m != 1000 {
		t.Fatalf("obtained %d + timed out %d != 1000", n, m)
	}
}

// Fault 9: a queued waiter's process is killed. The line moves on: the dead waiter keeps its
// place only until its liveness deadline (three retry intervals after its last look), and a
// lock handed to it meanwhile holds only the claim lease (three retry intervals), not a lease.
//
// Both are checked in Redis, on its own clock: the dead waiter's deadline is at most live
// ahead, and every hand-off to it (the release script publishes it, with the lease granted)
// grants claim at most. The next waiter must then be served; the wall-clock bound on that is
// several times the window those two allow, a backstop against a line blocked for good.
func TestFaultQueuedWaiterKilled(t *testing.T) {
	b := newBank(t)
	c := b.client(b.lockRDB)
	admin := b.lockSrv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	qKey := "lockguard:{" + b.key + "}:q"
	qdKey := "lockguard:{" + b.key + "}:qd"
	channel := "lockguard:{" + b.key + "}:ch"
	// A fixed lease, ended by the test's release: the holder keeps the lock however slowly
	// the machine runs until then.
	holder, err := c.Acquire(ctx, b.key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The doomed process waits in line (its Acquire bounded by a minute, so it does not leave
	// and queue again behind the next waiter).
	p := b.startProcessWait("doomed", 0, time.Minute, time.Minute)
	doomed := waitLine(ctx, t, admin, qKey, 1)[0]
	doomedOwner, _, _ := strings.Cut(doomed, ":")
	got := make(chan time.Time, 1)
	go func() { // queued after the doomed process
		lk, err := c.Acquire(ctx, b.key)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		_ = lk.Release(context.Background())
	}()
	if line := waitLine(ctx, t, admin, qKey, 2); line[0] != doomed {
		t.Fatalf("line %v: the doomed process (%s) is not first", line, doomed)
	}
	// Hand-off notices to other processes are published on the lock's channel; a marker
	// published on a channel of the same subscription after the next waiter is served comes
	// after every notice of the release.
	marker := "chaos-marker:" + b.key
	ps := admin.Subscribe(ctx, channel, marker)
	defer ps.Close()
	for range 2 {
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}

	_ = p.cmd.Process.Kill()
	<-p.done
	killed := time.Now()
	// Its place lasts live from its last look at most, on Redis's clock (a place gone
	// already, its line expired with nobody looking, lasts no longer).
	var score *redis.FloatCmd
	var now *redis.TimeCmd
	if _, err := admin.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		score, now = tx.ZScore(ctx, qdKey, doomed), tx.Time(ctx)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("the dead waiter's liveness deadline: %v", err)
	}
	var ahead time.Duration
	if score.Err() == nil {
		ahead = time.Duration(score.Val())*time.Millisecond - time.Duration(now.Val().UnixMilli())*time.Millisecond
	}
	if now.Err() != nil {
		t.Fatal(now.Err())
	}
	if ahead > live {
		t.Fatalf("the dead waiter keeps its place %v more, want %v at most (its liveness window)", ahead, live)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bound := 5 * (live + claim + retry)
	var at time.Time
	select {
	case v, ok := <-got:
		if !ok {
			t.FailNow()
		}
		at = v
	case <-time.After(bound):
		t.Fatalf("the next waiter was not served within %v of the holder's release: the dead waiter blocks the line", bound)
	}
	if err := admin.Publish(ctx, marker, "end").Err(); err != nil {
		t.Fatal(err)
	}
	handedToDead := 0
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel == marker {
			break
		}
		f := strings.Fields(m.Payload)
		if len(f) != 3 || f[0] != doomedOwner {
			continue
		}
		handedToDead++
		granted, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("hand-off notice %q: %v", m.Payload, err)
		}
		if g := time.Duration(granted) * time.Millisecond; g > claim {
			t.Fatalf("the lock was handed to the dead waiter for %v, want the claim lease (%v) at most", g, claim)
		}
	}
	t.Logf("RESULT | queued waiter SIGKILLed | next waiter served %v after the kill; the dead waiter's place had %v left, lock handed to it %d time(s) (claim %v); bound %v",
		at.Sub(killed).Round(time.Millisecond), ahead.Round(time.Millisecond), handedToDead, claim, bound)
}

// waitLine waits until the line of waiters holds n (stays put while the lock is held) and
// returns its members, first in line first.
func waitLine(ctx context.Context, t *testing.T, rdb *redis.Client, qKey string, n int) []string {
	t.Helper()
	for {
		line, err := rdb.ZRange(ctx, qKey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(line) >= n {
			return line
		}
		if ctx.Err() != nil {
			t.Fatalf("line %v, want %d waiters", line, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
