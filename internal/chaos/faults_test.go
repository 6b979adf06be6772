//go:build chaos

package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
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
	var token int64
	select {
	case token = <-p.holds:
	case <-ctx.Done():
		t.Fatal("the worker process never held the lock")
	}
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
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
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			wait := b.run(ctx, b.client(b.lockRDB), 6, 20*time.Millisecond)
			time.Sleep(1500 * time.Millisecond)
			if err := tc.fault(b); err != nil {
				t.Fatal(err)
			}
			heal := time.Now()
			wait()
			r := b.check(tc.name, heal, "")
			if r.FirstAckAfter == 0 || r.FirstAckAfter > lease+retry+time.Second {
				t.Errorf("work resumed %v after the fault healed", r.FirstAckAfter)
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

// Fault 9: a queued waiter's process is killed. The line moves on within the documented bound
// (three retry intervals for its place, plus the claim lease if the lock was handed to it).
func TestFaultQueuedWaiterKilled(t *testing.T) {
	b := newBank(t)
	c := b.client(b.lockRDB)
	ctx := context.Background()
	holder, err := c.Acquire(ctx, b.key)
	if err != nil {
		t.Fatal(err)
	}
	p := b.startProcess("doomed", 0, 10*time.Second) // queues behind holder
	time.Sleep(500 * time.Millisecond)
	got := make(chan time.Time, 1)
	go func() { // queued after the doomed process
		lk, err := c.Acquire(ctx, b.key)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		_ = lk.Release(ctx)
	}()
	time.Sleep(200 * time.Millisecond)
	_ = p.cmd.Process.Kill()
	<-p.done
	killed := time.Now()
	_ = holder.Release(ctx)
	at, ok := <-got
	if !ok {
		t.FailNow()
	}
	bound := 3*retry + 3*retry + 200*time.Millisecond
	t.Logf("RESULT | queued waiter SIGKILLed | next waiter served %v after the kill (bound %v)", at.Sub(killed).Round(time.Millisecond), bound)
	if at.Sub(killed) > bound {
		t.Fatalf("next waiter served %v after the kill, bound %v", at.Sub(killed), bound)
	}
}
