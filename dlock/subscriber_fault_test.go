package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// The pub/sub connection breaks and cannot be re-dialled for a while (here: Redis refuses new
// connections, maxclients), while commands still go through on pooled connections. Waits
// that begin then cannot subscribe and poll instead, as documented. Once the connection is
// back and those waits are long over, their channels must not stay subscribed: nobody in the
// process listens to them, and nothing will ever unsubscribe them while the connection is in
// use for other keys.
func TestFailedSubscribeLeavesNoSubscription(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rdbA := srv.Client(t)
	rdbB := srv.Client(t)
	ctx := context.Background()
	retry := 100 * time.Millisecond
	a, b := pinnedPair(t, rdbA, rdbB, retry)
	if msg := pollUntil(5*time.Second, func() string {
		if len(channelsMatching(t, admin, "*pin*")) == 0 {
			return "pin not subscribed"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	// Warm b's command pool so that its waits need no new connection.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { _ = rdbB.Ping(ctx).Err() })
	}
	wg.Wait()

	// Refuse new connections, then break b's pub/sub connection.
	normal, ps := connectionCounts(t, admin)
	t.Logf("clients: %d normal, %d pub/sub", normal, ps)
	if err := admin.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}

	// Waits on other keys while the pub/sub connection is down.
	const n = 20
	var holds []*dlock.Lock
	for i := range n {
		lk, err := a.Acquire(ctx, fmt.Sprintf("outage-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, lk)
	}
	for i := range n {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			_, err := b.Acquire(wctx, fmt.Sprintf("outage-%d", i))
			if err == nil {
				t.Errorf("outage-%d: obtained a held lock", i)
			}
		})
	}
	wg.Wait()
	for _, lk := range holds {
		_ = lk.Release(ctx)
	}

	// The connection comes back.
	if err := admin.ConfigSet(ctx, "maxclients", "10000").Err(); err != nil {
		t.Fatal(err)
	}
	if msg := pollUntil(10*time.Second, func() string {
		if len(channelsMatching(t, admin, "*pin*")) == 0 {
			return "pin not subscribed again"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	// Every outage wait ended seconds ago; their channels linger one second at most.
	var left []string
	msg := pollUntil(8*time.Second, func() string {
		left = channelsMatching(t, admin, "*outage-*")
		if len(left) > 0 {
			return fmt.Sprintf("%d channels of waits long over still subscribed, e.g. %v", len(left), left[:min(3, len(left))])
		}
		return ""
	})
	if msg != "" {
		t.Error(msg)
	}
}

// ctlConn is a connection whose writes, once it has carried a SUBSCRIBE, can be swallowed (a
// network that stops delivering), and which records what was written to it.
type ctlConn struct {
	net.Conn
	d   *ctlDialer
	sub atomic.Bool
}

type ctlDialer struct {
	blackhole atomic.Bool
	holdReads atomic.Bool // Redis's answers on pub/sub connections wait until it is cleared
	mu        sync.Mutex
	subConns  []*ctlConn
	written   strings.Builder
	gate      chan struct{} // non-nil: dials wait until it is closed (or their context ends)
	looks     *lookCounter  // the marked commands of the client that dials through it
}

// holdDials makes new dials wait until openDials.
func (d *ctlDialer) holdDials() {
	d.mu.Lock()
	d.gate = make(chan struct{})
	d.mu.Unlock()
}

func (d *ctlDialer) openDials() {
	d.mu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.mu.Unlock()
}

func (d *ctlDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	gate := d.gate
	d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &ctlConn{Conn: c, d: d}, nil
}

func (c *ctlConn) Write(p []byte) (int, error) {
	if strings.Contains(strings.ToLower(string(p)), "subscribe") && !c.sub.Swap(true) {
		c.d.mu.Lock()
		c.d.subConns = append(c.d.subConns, c)
		c.d.mu.Unlock()
	}
	if c.sub.Load() {
		c.d.mu.Lock()
		c.d.written.Write(p)
		c.d.mu.Unlock()
		if c.d.blackhole.Load() {
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

func (c *ctlConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for c.sub.Load() && c.d.holdReads.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	return n, err
}

func (d *ctlDialer) wrote(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Contains(d.written.String(), s)
}

// breakSubConns closes the pub/sub connections: go-redis re-dials and subscribes again.
func (d *ctlDialer) breakSubConns() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.subConns {
		_ = c.Conn.Close()
	}
	d.subConns = nil
}

// ctlSetup starts a Redis server and returns a ctlDialer with two clients on the server: a
// plain one, and one that dials through the ctlDialer.
func ctlSetup(t *testing.T) (d *ctlDialer, rdbA, rdbB *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	d = &ctlDialer{looks: newLookCounter()}
	rdbB = srv.Client(t, func(o *redis.Options) { o.Dialer = d.dial })
	rdbB.AddHook(d.looks)
	return d, srv.Client(t), rdbB
}

// holdAndWait makes a hold the lock for key and starts a waiter on w with 10 s to get it,
// which releases it at once; the waiter's error comes on the channel. The waiter's context
// is marked (markLooks): a lookCounter on w's client counts its looks.
func holdAndWait(t *testing.T, a, w *dlock.Client, key string) (*dlock.Lock, <-chan error) {
	t.Helper()
	ctx := context.Background()
	h, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(markLooks(ctx), 10*time.Second)
		defer cancel()
		lk, err := w.Acquire(wctx, key)
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	return h, got
}

// handOff makes a hold the lock for key, starts a waiter on w (whose client d dials) with
// 10 s to get it, releases once the waiter has looked twice (in line, then once more after
// subscribing, or after giving up waiting for the confirmation: it waits for the message)
// and its subscription of key is made in Redis and confirmed (ready: the test fails when it
// never is), and returns the waiter's error, once key's channel is unsubscribed again (after
// its linger): the next wait on key subscribes anew. The hand-off itself also reaches a
// subscription never taken for ready (messages go to every listener of the channel, ready or
// not): only the readiness check tells such a subscription from a sound one.
func handOff(t *testing.T, d *ctlDialer, rdb *redis.Client, a, w *dlock.Client, key string) error {
	t.Helper()
	ctx := testContext(t, time.Minute)
	waitChannel(t, ctx, rdb, key, false) // a wait subscribes key anew
	_, before := d.looks.counts()
	h, got := holdAndWait(t, a, w, key)
	d.looks.wait(t, ctx, "the waiter's second look", func(_, answered int) bool { return answered >= before+2 })
	waitChannel(t, ctx, rdb, key, true) // the waiter's SUBSCRIBE reached Redis
	// Redis confirms it at once; the subscriber must take the confirmation for this state.
	if msg := pollUntil(10*time.Second, func() string {
		if st := dlock.SubscriptionOf(w, key); !st.Ready {
			return fmt.Sprintf("%+v", st)
		}
		return ""
	}); msg != "" {
		t.Fatalf("%s: the waiter's subscription is in Redis but never taken for ready (subscriber's state %s): its confirmation went to another state of the channel",
			key, msg)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := <-got
	waitChannel(t, ctx, rdb, key, false) // past the channel's linger
	return err
}

// A SUBSCRIBE that got no confirmation because the pub/sub connection broke (its writes
// lost on the way, then the connection reset), for a channel unsubscribed before go-redis
// re-dialled, must not be remembered as awaiting confirmation: otherwise the next
// subscription of that channel takes its confirmation and is never marked ready. Its
// waiters still get the release message (it reaches every listener of the channel), so the
// hand-offs alone do not show it: the test checks the subscriber's state, that the lost
// state is forgotten once unsubscribed and that every later subscription of the channel is
// confirmed (see handOff).
func TestLostSubscribeConfirmationIsForgotten(t *testing.T) {
	d, rdbA, rdbB := ctlSetup(t)
	ctx := context.Background()
	const retry = 30 * time.Second
	a, b := pinnedPair(t, rdbA, rdbB, retry)

	if err := handOff(t, d, rdbA, a, b, "x"); err != nil {
		t.Fatalf("before: hand-off: %v", err)
	}

	// The network stops delivering b's pub/sub writes; a wait on x subscribes and gives up;
	// x is unsubscribed after its linger; then the connection resets and go-redis re-dials.
	h, err := a.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.written.Reset()
	d.mu.Unlock()
	d.blackhole.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _ = b.Acquire(wctx, "x")
	cancel()
	// x is unsubscribed confirmGrace after its SUBSCRIBE, when its confirmation is no longer
	// expected.
	if msg := pollUntil(15*time.Second, func() string {
		if !d.wrote("unsubscribe") || !d.wrote("$9\r\nsubscribe") {
			return "x not unsubscribed"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	// x's state is gone, and no longer awaits its confirmation, which will never come.
	if st := dlock.SubscriptionOf(b, "x"); st != (dlock.SubscriptionState{}) {
		t.Errorf("x unsubscribed after its lost confirmation: subscriber's state %+v, want none (not subscribed, nothing awaiting a confirmation)", st)
	}
	d.blackhole.Store(false)
	old := pubsubClientIDs(t, rdbA)
	d.breakSubConns()
	_ = h.Release(ctx)
	// Re-dialled, pin subscribed again: on a pub/sub connection other than the broken one.
	if msg := pollUntil(10*time.Second, func() string {
		ids := pubsubClientIDs(t, rdbA)
		for _, id := range strings.Split(ids, ",") {
			if id == "" || slices.Contains(strings.Split(old, ","), id) {
				return fmt.Sprintf("pub/sub connections %q, the broken ones %q: not re-dialled", ids, old)
			}
		}
		if len(channelsMatching(t, rdbA, "*pin*")) == 0 {
			return "pin not subscribed again"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}

	for i := range 3 {
		if err := handOff(t, d, rdbA, a, b, "x"); err != nil {
			t.Errorf("hand-off %d of x after the reset: %v (retry interval %v)", i, err, retry)
		}
	}
	if err := handOff(t, d, rdbA, a, b, "y"); err != nil {
		t.Errorf("control key y: %v", err)
	}
}

// A hand-off published while the waiter's pub/sub connection is down is lost with its
// message. Once go-redis has re-dialled and subscribed the channel again, the waiter looks at
// once and finds the lock handed to it. With a retry interval of 30 s and the holder's lease
// renewed, its next look would come long after its 10 s wait.
func TestWaiterLooksWhenSubscribedAgain(t *testing.T) {
	d, rdbA, rdbB := ctlSetup(t)
	const retry = 30 * time.Second
	a := newClient(t, rdbA, dlock.WithRetryInterval(retry))
	b := newClient(t, rdbB, dlock.WithRetryInterval(retry))
	h, got := holdAndWait(t, a, b, "x")
	if msg := pollUntil(5*time.Second, channelCount(t, rdbA, 1)); msg != "" {
		t.Fatal(msg)
	}
	// The waiter looked once more after subscribing.
	d.looks.wait(t, testContext(t, time.Minute), "the waiter's look after subscribing",
		func(_, answered int) bool { return answered >= 2 })

	d.holdDials()
	d.breakSubConns()
	if err := handOffWhileDown(t, d, rdbA, h, got); err != nil {
		t.Fatalf("waiter after the reconnect: %v (retry interval %v): it did not look when subscribed again", err, retry)
	}
}

// channelCount is a pollUntil condition: Redis has want channels subscribed.
func channelCount(t *testing.T, rdb *redis.Client, want int) func() string {
	return func() string {
		if n := len(channelsMatching(t, rdb, "*")); n != want {
			return fmt.Sprintf("%d channels subscribed, want %d", n, want)
		}
		return ""
	}
}

// handOffWhileDown waits until Redis has no channel subscribed (the waiter's pub/sub
// connection broken, its re-dials held), releases h, whose hand-off message then reaches
// nobody, lets the dials through and returns the waiter's error.
func handOffWhileDown(t *testing.T, d *ctlDialer, rdb *redis.Client, h *dlock.Lock, got <-chan error) error {
	t.Helper()
	if msg := pollUntil(5*time.Second, channelCount(t, rdb, 0)); msg != "" {
		t.Fatal(msg)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.openDials()
	return <-got
}

// A subscription not yet confirmed when its connection broke is confirmed by go-redis's
// subscribe after the reconnect. Its waiter went on without it after 250 ms (looking every
// retry interval, here 30 s); it looks once more when the confirmation comes, and finds the
// lock handed to it while the connection was down.
func TestWaiterLooksWhenSubscriptionConfirmedLate(t *testing.T) {
	d, rdbA, rdbB := ctlSetup(t)
	const retry = 30 * time.Second
	a, b := pinnedPair(t, rdbA, rdbB, retry) // b's pub/sub connection is up

	d.blackhole.Store(true) // b's pub/sub writes stop reaching Redis
	h, got := holdAndWait(t, a, b, "x")
	if msg := pollUntil(5*time.Second, func() string {
		if !d.wrote("{x}") {
			return "no SUBSCRIBE of x"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	// The waiter looked without its subscription (after its confirm wait), and waits.
	d.looks.wait(t, testContext(t, time.Minute), "the waiter's look after its confirm wait",
		func(_, answered int) bool { return answered >= 2 })
	d.holdDials()
	d.breakSubConns()
	d.blackhole.Store(false)
	if err := handOffWhileDown(t, d, rdbA, h, got); err != nil {
		t.Fatalf("waiter after the reconnect: %v (retry interval %v): it did not look when its subscription was confirmed", err, retry)
	}
}

// On one server Redis never ends a subscription itself. A confirmation later than
// confirmGrace puts the answers that follow it out of step with what the subscriber sent:
// here Redis answers SUBSCRIBE k (given up), UNSUBSCRIBE k, SUBSCRIBE k (a new waiter), and
// the first answer is taken for the new SUBSCRIBE. The UNSUBSCRIBE's answer must not then be
// taken for Redis ending the subscription: the connection is healthy and stays.
func TestLateConfirmationKeepsConnection(t *testing.T) {
	d, rdbA, rdbB := ctlSetup(t)
	ctx := context.Background()
	a, b := pinnedPair(t, rdbA, rdbB, 30*time.Second) // b's pub/sub connection is up
	before := pubsubClientIDs(t, rdbA)
	h, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	d.holdReads.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	_, err = b.Acquire(wctx, "k")
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("waiter given up: %v, want ErrNotObtained", err)
	}
	// k is unsubscribed confirmGrace after its SUBSCRIBE, its confirmation still held back.
	if msg := pollUntil(10*time.Second, func() string {
		if !d.wrote("unsubscribe") {
			return "k not unsubscribed"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	wait := testContext(t, 10*time.Second)
	waitChannel(t, wait, rdbA, "k", false) // Redis took the UNSUBSCRIBE: a subscriber of k now is the new one
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		lk, err := b.Acquire(wctx, "k")
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	if msg := pollUntil(5*time.Second, func() string {
		d.mu.Lock()
		n := strings.Count(d.written.String(), "{k}")
		d.mu.Unlock()
		if n < 3 {
			return "k not subscribed again"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	// Redis took the new SUBSCRIBE, and the waiter is in line: the release hands it the lock
	// with a message on k.
	waitChannel(t, wait, rdbA, "k", true)
	waitQueued(t, rdbA, wait, "k")
	d.holdReads.Store(false)
	// The second waiter gets the lock from the release's message, which Redis sends after
	// the answers held back: the subscriber has read them all by then.
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("second waiter: %v", err)
	}
	if after := pubsubClientIDs(t, rdbA); after != before {
		t.Errorf("pub/sub connections %s before, %s after: the healthy connection was dropped", before, after)
	}
}

// pubsubClientIDs returns the ids of Redis's pub/sub connections, comma-separated.
func pubsubClientIDs(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	s, err := rdb.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range strings.Fields(s) {
		if id, ok := strings.CutPrefix(f, "id="); ok {
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, ",")
}

// channelsMatching returns the channels Redis has subscribers for, matching pattern.
func channelsMatching(t testing.TB, rdb *redis.Client, pattern string) []string {
	t.Helper()
	chs, err := rdb.PubSubChannels(context.Background(), pattern).Result()
	if err != nil {
		t.Fatalf("PUBSUB CHANNELS: %v", err)
	}
	return chs
}

// connectionCounts returns the number of connections Redis has, by type (normal, pub/sub).
func connectionCounts(t testing.TB, rdb *redis.Client) (normal, pubsub int) {
	t.Helper()
	s, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue
		}
		if strings.Contains(line, "sub=0 psub=0") && !strings.Contains(line, "flags=P") {
			normal++
		} else {
			pubsub++
		}
	}
	return normal, pubsub
}

// pollUntil polls cond every 100 ms until it returns "" or timeout passes; it returns the
// last non-empty description.
func pollUntil(timeout time.Duration, cond func() string) string {
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" || time.Now().After(deadline) {
			return msg
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pinnedPair makes two Clients, a on rdbA and b on rdbB, and has b wait throughout the test
// for a lock a holds ("pin"), so b's pub/sub connection stays in use. It returns once pin is
// subscribed: b's pub/sub connection is up. All of it ends when the test does.
func pinnedPair(t *testing.T, rdbA, rdbB *redis.Client, retry time.Duration) (a, b *dlock.Client) {
	t.Helper()
	a = newClient(t, rdbA, dlock.WithRetryInterval(retry))
	b = newClient(t, rdbB, dlock.WithRetryInterval(retry))
	pin, err := a.Acquire(context.Background(), "pin")
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(context.Background())
	pinDone := make(chan struct{})
	go func() { defer close(pinDone); _, _ = b.Acquire(pctx, "pin") }()
	t.Cleanup(func() {
		stop()
		<-pinDone
		_ = pin.Release(context.Background())
	})
	waitChannel(t, testContext(t, time.Minute), rdbA, "pin", true)
	return a, b
}
