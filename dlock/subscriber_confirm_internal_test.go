package dlock

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A channel's subscribe is queued behind a slow dial for longer than linger, and its waiter
// gives up. Were the linger to end the subscription then (SUBSCRIBE old, UNSUBSCRIBE,
// SUBSCRIBE new for the next waiter), the confirmation of the OLD subscribe, matched by
// channel name only, could mark the NEW channel state ready before its SUBSCRIBE reached
// Redis, and listenReady would hand out listeners that miss every notice until it lands. A
// subscription whose confirmation is still to come is therefore kept past its linger, and
// the next waiter uses it: one SUBSCRIBE, confirmed once, and no notice missed. Here the slow
// node is played by held dials and slow writes.
func TestOldConfirmationDoesNotReadyNewSubscription(t *testing.T) {
	srv := redistest.Start(t)
	pub := srv.Client(t)
	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	s := newSubscriber(rdb, false)
	defer s.close()
	ctx := context.Background()

	const ch = "sub:cross"
	others := []string{"sub:other1", "sub:other2", "sub:other3"}
	var subs atomic.Int32
	n.stall = func(p []byte) time.Duration {
		switch {
		case bytes.Contains(p, []byte("\r\nunsubscribe\r\n")), isSubscribeOf(p, others[0]), isSubscribeOf(p, others[1]), isSubscribeOf(p, others[2]):
			// Short delays (slow writes of other changes queued meanwhile): the receive loop,
			// waiting for the PubSub mutex, gets it in between (Go hands a mutex to a waiter
			// of over 1 ms) and passes on the old confirmation.
			return 100 * time.Millisecond
		case isSubscribeOf(p, ch) && subs.Add(1) == 2:
			return 2 * time.Second // the new SUBSCRIBE reaches the (slow) node late
		}
		return 0
	}
	n.block()

	ctx1, cancel1 := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := s.listen(ctx1, ch, 0, "a")
	cancel1()
	if err == nil {
		t.Fatal("first listen returned while its dial is held")
	}
	// The linger runs out with the subscribe still unsent: were the subscription ended then,
	// the unsubscribe would be queued behind the subscribe.
	if !waitFor(linger+5*time.Second, lingerRanOut(t, s, ch)) {
		t.Fatal("the first listener's linger never ran out")
	}

	type result struct {
		l   listener
		err error
	}
	got := make(chan result, 1+len(others))
	registered := func(c string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		conn := s.conns[0]
		return conn != nil && conn.chans[c] != nil
	}
	// Other waiters of this process, on other keys, queue their subscribes meanwhile.
	for _, other := range others {
		go func() {
			l, err := s.listen(ctx, other, 0, "o")
			got <- result{l, err}
		}()
		if !waitFor(2*time.Second, func() bool { return registered(other) }) {
			t.Fatal("other listen did not register")
		}
	}
	go func() {
		l, err := s.listen(ctx, ch, 0, "b")
		got <- result{l, err}
	}()
	if !waitFor(2*time.Second, func() bool { return registered(ch) }) {
		t.Fatal("second listen did not register")
	}
	n.release()

	var lr listener
	if !waitFor(8*time.Second, func() bool { lr = s.listenReady(ch, 0, "c"); return lr != nil }) {
		t.Fatal("channel never confirmed")
	}
	defer lr.Close()
	// Let Redis process what was sent so far.
	waitFor(time.Second, func() bool { return pub.PubSubNumSub(ctx, ch).Val()[ch] == 0 })
	numsub := pub.PubSubNumSub(ctx, ch).Val()[ch]
	if err := pub.Publish(ctx, ch, "c 7 1000").Err(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	newSub := s.conns[0].chans[ch].sub.done
	s.mu.Unlock()
	newSubDone := false
	select {
	case <-newSub:
		newSubDone = true
	default:
	}
	select {
	case <-lr.C():
	case <-time.After(1500 * time.Millisecond):
		t.Errorf("listenReady gave a listener (Ready closed) but a notice published then was lost: PUBSUB NUMSUB %s = %d when published; the state's own SUBSCRIBE sent by then: %v",
			ch, numsub, newSubDone)
	}
	for range 1 + len(others) {
		r := <-got
		if r.err != nil {
			t.Fatalf("listen: %v", r.err)
		}
		r.l.Close()
	}
	if n := subs.Load(); n != 1 {
		t.Errorf("SUBSCRIBE of %s sent %d times, want 1: the unconfirmed subscription was ended at its linger instead of kept for the next waiter", ch, n)
	}
}

// A waiter subscribes while Redis is paused (CLIENT PAUSE) and gives up before the
// confirmation comes; its linger ends while the confirmation is still on the way. The
// subscription is kept, and a waiter that comes back uses it: no UNSUBSCRIBE, no second
// SUBSCRIBE, and the confirmation, once Redis answers, marks it ready.
func TestLateConfirmationKeepsSubscription(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	n := &testNet{}
	var subs, unsubs atomic.Int32
	const ch = "sub:late"
	n.stall = func(p []byte) time.Duration {
		if isSubscribeOf(p, ch) {
			subs.Add(1)
		}
		if bytes.Contains(bytes.ToLower(p), []byte("\r\nunsubscribe\r\n")) {
			unsubs.Add(1)
		}
		return 0
	}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	s := newSubscriber(rdb, false)
	defer s.close()
	ctx := context.Background()

	// Dial the connection first, so that the paused server only holds back the confirmation.
	warm := mustListen(t, s, "sub:warm", "w")
	defer warm.Close()
	pause := linger + 1500*time.Millisecond
	if err := srv.Pause(ctx, pause); err != nil {
		t.Fatal(err)
	}
	l, err := s.listen(ctx, ch, 0, "a")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Ready():
		t.Fatal("subscription confirmed while Redis is paused")
	case <-time.After(200 * time.Millisecond):
	}
	l.Close() // the waiter gave up
	// Its linger runs out while Redis is still paused: the confirmation is on the way.
	if !waitFor(linger+5*time.Second, lingerRanOut(t, s, ch)) {
		t.Fatal("the linger never ran out")
	}

	l2, err := s.listen(ctx, ch, 0, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	select {
	case <-l2.Ready():
	case <-time.After(pause + 5*time.Second):
		t.Fatal("kept subscription never confirmed")
	}
	if err := admin.Publish(ctx, ch, "b 9 1000").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-l2.C():
		if got.token != 9 {
			t.Errorf("notice token %d, want 9", got.token)
		}
	case <-time.After(2 * time.Second):
		t.Error("notice published after the confirmation was not delivered")
	}
	if subs.Load() != 1 || unsubs.Load() != 0 {
		t.Errorf("SUBSCRIBE of %s sent %d times and UNSUBSCRIBE %d times, want 1 and 0: the subscription was ended while its confirmation was on the way",
			ch, subs.Load(), unsubs.Load())
	}
}

// lingerRanOut returns a func that reports whether the linger pending now on channel's
// subscription (on the connection of slot 0) has run out since: the subscriber then either
// ended the subscription or kept it and set a linger again (its confirmation still to come).
func lingerRanOut(t *testing.T, s *subscriber, channel string) func() bool {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	conn := s.conns[0]
	var cs *chanState
	if conn != nil {
		cs = conn.chans[channel]
	}
	if cs == nil || cs.linger == nil {
		t.Fatalf("%s: no linger pending", channel)
	}
	timer := cs.linger
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return conn.dropped || conn.chans[channel] != cs || cs.linger != timer
	}
}
