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

// A channel's subscribe is queued behind a slow dial for longer than linger; its waiter gives
// up, the linger ends and queues the unsubscribe, and a new waiter queues a new subscribe:
// SUBSCRIBE (old), UNSUBSCRIBE, SUBSCRIBE (new). The confirmation of the OLD subscribe is
// matched by channel name only and marks the NEW channel state ready, although the new
// SUBSCRIBE has not even been sent and the UNSUBSCRIBE is about to end the subscription.
// listenReady then hands out listeners that miss every notice until the new SUBSCRIBE lands.
// (The old code sent both under mu, synchronously: the old confirmation came long before the
// linger could end.) Here the slow node is played by held dials and slow writes.
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
	time.Sleep(linger + 500*time.Millisecond) // the unsubscribe is queued behind the subscribe

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
}
