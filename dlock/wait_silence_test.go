package dlock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// Redis holding writes (CLIENT PAUSE WRITE, as FAILOVER and a Cluster manual failover do)
// holds the acquire script; the probe, a script too, is held the same way, so the wait on a
// free lock ends with ErrUnavailable, not as a busy lock. (A read as the probe was answered.)
func TestWritePauseIsUnavailable(t *testing.T) {
	srv, _, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t) // nobody holds it
	lk, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Release(ctx)

	admin := redis.NewClient(srv.Options())
	defer func() { _ = admin.Close() }()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 1500, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err() }()

	wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	lk, err = c.Acquire(wctx, key)
	cancel()
	if err == nil {
		_ = lk.Release(ctx)
		t.Fatal("precondition: the acquire script ran during CLIENT PAUSE WRITE")
	}
	if errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("free lock, Redis holding writes, look unanswered: err = %v (ErrNotObtained=%v); want ErrUnavailable, not a busy lock",
			err, errors.Is(err, dlock.ErrNotObtained))
	}
}

// On a Cluster, a wait on a free key whose node is paused ends with ErrUnavailable, also
// while the other nodes answer this Client's other calls: their answers say nothing of the
// silent node.
func TestClusterSilentNodeIsUnavailable(t *testing.T) { clusterSilentNode(t, true) }

func clusterSilentNode(t *testing.T, traffic bool) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	c := newClient(t, rdb)
	ctx := testContext(t, 30*time.Second)

	masters, keys := keyPerMaster(t, ctx, cl)
	silent, silentKey, otherKey := masters[0], keys[0], keys[1]
	for _, k := range []string{silentKey, otherKey} { // cluster state, scripts, connections
		lk, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		_ = lk.Release(ctx)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the rest of the service, working on keys of healthy nodes
		defer wg.Done()
		for traffic {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if lk, err := c.TryAcquire(ctx, otherKey); err == nil {
				_ = lk.Release(ctx)
			}
		}
	}()
	if err := silent.Pause(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	lk, err := c.Acquire(wctx, silentKey)
	cancel()
	close(stop)
	wg.Wait()
	time.Sleep(1600 * time.Millisecond) // let the pause end before the cleanups run
	if err == nil {
		_ = lk.Release(ctx)
		t.Fatal("precondition: the paused node answered")
	}
	if errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("free key on a silent Cluster node, other nodes answering: err = %v; want ErrUnavailable, not a busy lock", err)
	}
}

// A wait whose look is unanswered when its context ends while Close runs sends no probe:
// once closing, calls run without the bound of their context (go-redis without
// ContextTimeoutEnabled ignores the deadline), so a probe would wait for the client's
// ReadTimeout.
//
// The case needs Close begun before the wait's 300 ms deadline, when its look fails: a
// machine that stalls past it makes the look fail before Close, and the probe then sent is
// bounded. Each attempt says whether Close had begun before that deadline (and the wait ended
// with the store silent); one that had not is run again, and the test fails when none had.
func TestNoProbeDuringClose(t *testing.T) {
	const attempts = 5
	for attempt := 1; attempt <= attempts; attempt++ {
		if noProbeDuringClose(t) {
			return
		}
		t.Logf("attempt %d: Close had not begun before the wait's deadline, or the look was answered: the case was not reached", attempt)
	}
	t.Fatalf("in %d attempts, Close never began before the deadline of a wait whose look Redis left unanswered: "+
		"a look failing while Close runs was never tested", attempts)
}

// noProbeDuringClose runs one attempt of TestNoProbeDuringClose on a new server (the one of an
// attempt before stays paused) and Client, failing the test when the wait took long enough to
// have sent a probe. It reports whether the case was reached: Close had begun before the
// wait's deadline, and the wait ended with ErrUnavailable (its look unanswered).
func noProbeDuringClose(t *testing.T) bool {
	t.Helper()
	srv := redistest.Start(t)
	looks := newLookCounter() // the wait's look (marked by markLooks)
	rdb := srv.Client(t)
	rdb.AddHook(looks)
	c := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Release(ctx)

	if err := srv.Pause(ctx, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	type result struct {
		err  error
		took time.Duration
	}
	got := make(chan result, 1)
	start := time.Now()
	wctx, cancel := context.WithTimeout(markLooks(ctx), 300*time.Millisecond)
	defer cancel()
	deadline, _ := wctx.Deadline()
	go func() {
		lk, err := c.Acquire(wctx, key)
		if err == nil {
			_ = lk.Release(ctx)
		}
		got <- result{err, time.Since(start)}
	}()
	// Close once the wait's look is on its way to the paused Redis.
	looks.wait(t, ctx, "the wait's look sent", func(sent, _ int) bool { return sent >= 1 })
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	// Seen begun now, not yet past the deadline: Close had begun before the look failed.
	for !dlock.CloseBegun(c) {
		select {
		case <-ctx.Done():
			t.Fatal("Close never began")
		case <-time.After(time.Millisecond):
		}
	}
	closedFirst := time.Now().Before(deadline)
	r := <-got
	err, took := r.err, r.took
	<-closed
	t.Logf("Acquire returned after %v: %v (Close begun before its deadline: %v)", took, err, closedFirst)
	if took > 2*time.Second { // a probe would wait for the client's ReadTimeout (3 s)
		t.Fatalf("Acquire with a 300ms deadline returned after %v (Close ran meanwhile): it sent a probe", took)
	}
	return closedFirst && errors.Is(err, dlock.ErrUnavailable)
}

// A wait whose context ends between two looks at the lock, with Redis silent since the last
// one (paused, or the server gone), ends with ErrUnavailable and the context's error, not as
// a busy lock: the last look found the lock busy, but waits hear of releases by message and
// look only every retry interval, so that look says nothing of the store now. With Redis
// answering, the same wait ran out: ErrNotObtained.
func TestStoreSilentBetweenLooksIsUnavailable(t *testing.T) {
	t.Run("at the subscription", testStoreSilentAtSubscription)
	for _, tc := range []struct {
		name  string
		fault func(context.Context, *redistest.Server) error
	}{
		{"answering", nil},
		{"paused", func(ctx context.Context, s *redistest.Server) error { return s.Pause(ctx, 4*time.Second) }},
		{"killed", func(_ context.Context, s *redistest.Server) error { return s.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, rdb, _ := setup(t)
			looks := newLookCounter()
			crdb := srv.Client(t)
			crdb.AddHook(looks)
			// Its looks: the first, the one once subscribed; the next is an hour away.
			c := newClient(t, crdb, dlock.WithRetryInterval(time.Hour))
			ctx := testContext(t, 20*time.Second)
			key := uniqueKey(t)
			held, err := newClient(t, rdb).Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Release(context.Background()) }()

			// The wait's context ends 3 s after it began, while Redis is faulted (paused for
			// 4 s from a moment after the wait began).
			wctx, cancel := context.WithTimeout(markLooks(ctx), 3*time.Second)
			defer cancel()
			res := acquireOutcome(c, wctx, key)
			// The waiter is in line, between looks: subscribed, and looked once more since.
			waitQueued(t, rdb, ctx, key)
			waitChannel(t, ctx, rdb, key, true)
			looks.wait(t, ctx, "the waiter's look after subscribing", func(_, answered int) bool { return answered >= 2 })
			if wctx.Err() != nil {
				t.Fatal("the wait ran out before it was between looks")
			}
			if tc.fault != nil {
				if err := tc.fault(ctx, srv); err != nil {
					t.Fatal(err)
				}
			}
			r := <-res
			lk, err := r.lk, r.err
			if err == nil {
				_ = lk.Release(ctx)
				t.Fatal("obtained a held lock")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want it to match the context's error", err)
			}
			busy, down := errors.Is(err, dlock.ErrNotObtained), errors.Is(err, dlock.ErrUnavailable)
			if tc.fault == nil && (!busy || down) {
				t.Errorf("Redis answering: err = %v (ErrNotObtained=%v, ErrUnavailable=%v); want a wait that ran out", err, busy, down)
			}
			if tc.fault != nil && (busy || !down) {
				t.Errorf("Redis %s: err = %v (ErrNotObtained=%v, ErrUnavailable=%v); want ErrUnavailable, not a busy lock", tc.name, err, busy, down)
			}
		})
	}
}

// Redis falls silent (CLIENT PAUSE) just after the waiter's first look found the lock busy,
// as the waiter's Client dials its pub/sub connection, and the wait's context ends while the
// subscription is still being made: ErrUnavailable and the context's error, as between
// looks, not a busy lock.
func testStoreSilentAtSubscription(t *testing.T) {
	srv, rdb, _ := setup(t)
	var pauseAtDial atomic.Bool
	wrdb := srv.Client(t, func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if pauseAtDial.CompareAndSwap(true, false) {
				if err := srv.Pause(context.Background(), 3*time.Second); err != nil {
					return nil, err
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	ctx := testContext(t, 20*time.Second)
	if err := wrdb.Ping(ctx).Err(); err != nil { // the pool's connection for the looks
		t.Fatal(err)
	}
	waiter := newClient(t, wrdb)
	key := uniqueKey(t)
	held, err := newClient(t, rdb).Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()

	pauseAtDial.Store(true) // the waiter's next dial is its pub/sub connection
	wctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	lk, err := waiter.Acquire(wctx, key)
	if pauseAtDial.Load() {
		t.Fatal("the waiter dialled no pub/sub connection")
	}
	if err == nil {
		_ = lk.Release(ctx)
		t.Fatal("obtained a held lock")
	}
	busy, down := errors.Is(err, dlock.ErrNotObtained), errors.Is(err, dlock.ErrUnavailable)
	if !errors.Is(err, context.DeadlineExceeded) || busy || !down {
		t.Errorf("Redis paused at the subscription: err = %v (ErrNotObtained=%v, ErrUnavailable=%v); want ErrUnavailable and the context's error", err, busy, down)
	}
}
