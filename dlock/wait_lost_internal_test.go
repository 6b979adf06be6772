package dlock

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A wait whose subscription is lost while it waits (here: its SUBSCRIBE, still being sent
// when listen returned, fails as the dial of the pub/sub connection fails) looks at the lock
// before it subscribes again, as a wait whose SUBSCRIBE failed at once does: the subscribe
// (a dial, and the wait for Redis to confirm) does not come between its looks, which keep
// its place in line alive. Before, it subscribed first and looked after.
func TestLostSubscriptionLooksBeforeSubscribing(t *testing.T) {
	rig := newLostRig(t)
	rig.dials.holdNext(1)
	got := rig.wait()
	// The first look, the subscription (listen returns with its dial held), the look after
	// the wait for its confirmation; then the wait is idle until a message or its next look
	// an hour away.
	if !waitFor(10*time.Second, func() bool { return rig.spy.count("answered") == 2 }) {
		t.Fatalf("the waiter did not look twice: %v", rig.spy.log())
	}
	// No look in flight when the subscription is lost: the wait is in its select.
	if !waitFor(10*time.Second, func() bool { return rig.spy.count("idle") >= 1 }) {
		t.Fatalf("the waiter did not come to wait after its second look: %v", rig.spy.log())
	}
	rig.spy.note("lost")
	rig.dials.failOne()
	if !waitFor(10*time.Second, func() bool { _, ok := rig.spy.after("lost", "listen"); return ok }) {
		t.Fatalf("the waiter did not subscribe again after its subscription was lost: %v", rig.spy.log())
	}
	if between, _ := rig.spy.after("lost", "listen"); !slices.Contains(between, "answered") {
		t.Errorf("after its subscription was lost the waiter subscribed again before it looked at "+
			"the lock (%v after the loss; all: %v)", between, rig.spy.log())
	}
	rig.handOff(got)
}

// A SUBSCRIBE that fails while the wait waits for Redis to confirm it (its dial failing
// after listen returned) ends that wait: the waiter looks at once, without sitting out the
// confirm wait (asking, at its end, whether the subscription went astray: Unconfirmed), and
// subscribes again after that look. Before, the wait for the confirmation ignored the loss.
// The loss comes on the wait's first subscription, and on the one it makes after a loss.
func TestSubscribeFailingUnconfirmedEndsConfirmWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose int // how many subscriptions in a row fail while awaiting confirmation
	}{
		{"first subscription", 1},
		{"subscription made again", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newLostRig(t)
			rig.dials.holdNext(tc.lose)
			listens := 0
			// listen returned with the dial of its SUBSCRIBE held: the dial fails now, before
			// the wait for the confirmation begins, so that wait sees the loss, whenever it
			// comes to look.
			rig.spy.listened = func(l listener) {
				if listens++; listens > tc.lose {
					return
				}
				rig.dials.failOne()
				select {
				case <-l.Gone():
				case <-time.After(10 * time.Second):
					t.Errorf("subscription %d not lost after its dial failed", listens)
				}
			}
			got := rig.wait()
			if !waitFor(10*time.Second, func() bool { return rig.spy.count("listen") == tc.lose+1 }) {
				t.Fatalf("the waiter did not subscribe %d times: %v", tc.lose+1, rig.spy.log())
			}
			log := rig.spy.log()
			for i := range tc.lose {
				between := rig.spy.between(i+1, "listen")
				if slices.Contains(between, "unconfirmed") || !slices.Contains(between, "answered") {
					t.Errorf("after subscription %d failed unconfirmed: %v, want a look at once, and no "+
						"confirm wait sat out (unconfirmed) (all: %v)", i+1, between, log)
				}
			}
			rig.handOff(got)
		})
	}
}

// lostRig is a waiter whose pub/sub dials the test can hold and fail, behind a lock held by
// another Client.
type lostRig struct {
	t     *testing.T
	ctx   context.Context
	admin *redis.Client
	key   string
	held  *Lock
	w     *Client
	spy   *waitSpy
	dials *failingDials
}

// newLostRig makes the waiter (retry interval an hour: it looks only when the test makes it)
// and takes the lock with the holder (lease an hour: the waiter's next look is not set by
// its end). listen returns after 50 ms with the SUBSCRIBE still being sent.
func newLostRig(t *testing.T) *lostRig {
	t.Helper()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	holder := New(srv.Client(t), WithLease(time.Hour))
	t.Cleanup(func() { _ = holder.Close() })
	dials := &failingDials{fail: make(chan struct{}, 4)}
	w := New(srv.Client(t, func(o *redis.Options) { o.Dialer = dials.dial }), WithRetryInterval(time.Hour))
	t.Cleanup(func() { _ = w.Close() })
	w.be.(*redisBackend).subs.sendWait = 50 * time.Millisecond
	key := t.Name()
	// Load the scripts and make the command connection, before any dial is held.
	if lk, err := w.Acquire(ctx, key+"-warm"); err != nil {
		t.Fatal(err)
	} else if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	spy := &waitSpy{backend: w.be}
	w.be = spy
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return &lostRig{t: t, ctx: ctx, admin: srv.Client(t), key: key, held: held, w: w, spy: spy, dials: dials}
}

// wait starts the waiter's Acquire; its result comes on the channel.
func (r *lostRig) wait() <-chan lockResult {
	return goAcquire(func() (*Lock, error) { return r.w.Acquire(r.ctx, r.key) })
}

// handOff releases the holder's lock: the waiter, subscribed again, gets it.
func (r *lostRig) handOff(got <-chan lockResult) {
	r.t.Helper()
	_, ch := r.spy.backend.(*redisBackend).keys(r.key)
	if !waitFor(10*time.Second, func() bool { return r.admin.PubSubNumSub(r.ctx, ch).Val()[ch] == 1 }) {
		r.t.Fatalf("the waiter never subscribed again: %v", r.spy.log())
	}
	if err := r.held.Release(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		r.t.Fatalf("waiter: %v", res.err)
	}
	if err := res.lk.Release(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// waitSpy notes, in order, the answered looks at the lock ("answered"), the subscriptions
// ("listen"), the waits for a confirmation sat out ("unconfirmed"), the wait loop coming to
// wait for a message ("idle") and the test's marks.
type waitSpy struct {
	backend
	mu     sync.Mutex
	events []string
	// listened, if set, is called with each listener listen returns, before the wait gets it.
	listened func(listener)
}

func (s *waitSpy) note(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *waitSpy) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func (s *waitSpy) count(e string) int {
	n := 0
	for _, x := range s.log() {
		if x == e {
			n++
		}
	}
	return n
}

// after returns the events after the first mark and before the next end that follows it;
// ok is false while that end has not come.
func (s *waitSpy) after(mark, end string) (events []string, ok bool) {
	log := s.log()
	i := slices.Index(log, mark)
	if i < 0 {
		return nil, false
	}
	j := slices.Index(log[i+1:], end)
	if j < 0 {
		return nil, false
	}
	return log[i+1 : i+1+j], true
}

// between returns the events between the n-th (from 1) and the next occurrence of e.
func (s *waitSpy) between(n int, e string) []string {
	var idx []int
	log := s.log()
	for i, x := range log {
		if x == e {
			idx = append(idx, i)
		}
	}
	if len(idx) <= n {
		return nil
	}
	return log[idx[n-1]+1 : idx[n]]
}

func (s *waitSpy) acquire(ctx context.Context, r acquireRequest) (acquireResult, error) {
	res, err := s.backend.acquire(ctx, r)
	s.note("answered")
	return res, err
}

func (s *waitSpy) listen(ctx context.Context, key, owner string) (listener, error) {
	s.note("listen")
	l, err := s.backend.listen(ctx, key, owner)
	if err != nil {
		return nil, err
	}
	if s.listened != nil {
		s.listened(l)
	}
	return spyListener{listener: l, s: s}, nil
}

// spyListener notes the confirm waits sat out, and the wait loop coming to its select (which
// takes C, the last call before it blocks).
type spyListener struct {
	listener
	s *waitSpy
}

func (l spyListener) C() <-chan notice {
	l.s.note("idle")
	return l.listener.C()
}

func (l spyListener) Unconfirmed() {
	l.s.note("unconfirmed")
	l.listener.Unconfirmed()
}

// failingDials holds the dials it is told to (holdNext), each until failOne lets one fail.
type failingDials struct {
	mu   sync.Mutex
	hold int
	fail chan struct{}
}

func (d *failingDials) holdNext(n int) {
	d.mu.Lock()
	d.hold = n
	d.mu.Unlock()
}

// failOne fails a held dial, now or when it comes.
func (d *failingDials) failOne() { d.fail <- struct{}{} }

func (d *failingDials) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	held := d.hold > 0
	if held {
		d.hold--
	}
	d.mu.Unlock()
	if held {
		select {
		case <-d.fail:
			return nil, errors.New("test: dial failed")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}
