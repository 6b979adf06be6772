package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/internal/redistest"
)

// close() while the first SUBSCRIBE of a connection is dialling, with a second channel's
// SUBSCRIBE queued behind it: both listens end with ErrClosed, not with the cancelled dial's
// error.
func TestCloseFailsQueuedListensWithErrClosed(t *testing.T) {
	srv := redistest.Start(t)
	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	s := newSubscriber(rdb, false)
	n.block()
	defer n.release()
	ctx := context.Background()

	errs := make(chan error, 2)
	go func() { _, err := s.listen(ctx, "sub:first", 0, "a"); errs <- err }()
	if !waitFor(5*time.Second, func() bool { return n.waiting() == 1 }) {
		t.Fatal("first subscribe never dialled")
	}
	go func() { _, err := s.listen(ctx, "sub:second", 0, "b"); errs <- err }()
	if !waitFor(5*time.Second, func() bool { return curState(s, "sub:second") != nil }) {
		t.Fatal("second listen never registered")
	}
	s.close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("listen ended by close returned %v, want an error matching ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("listen did not return after close")
		}
	}
}

// After CLIENT KILL TYPE pubsub, go-redis reconnects and resubscribes; existing
// listeners still get notices, and new channels are confirmed and get notices.
func TestNoticesAfterPubSubReconnect(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rdb := srv.Client(t)
	s := newSubscriber(rdb, false)
	defer s.close()
	ctx := context.Background()

	l := mustListen(t, s, "sub:k1", "a")
	defer l.Close()
	killPubSub(t, admin)
	if !waitFor(5*time.Second, func() bool { return numSub(t, admin, "sub:k1") == 1 }) {
		t.Fatal("not resubscribed after kill")
	}
	// Subscribed again: the listener is told to look (a hand-off may have been lost).
	select {
	case nt := <-l.C():
		if nt.token != 0 {
			t.Fatalf("first notice after the reconnect %+v, want a look-again notice", nt)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no look-again notice after the reconnect")
	}
	if err := admin.Publish(ctx, "sub:k1", "a 5 1000").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case nt := <-l.C():
		if nt.token != 5 {
			t.Fatalf("notice %+v", nt)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("existing listener lost notices after the reconnect")
	}
	l2 := mustListen(t, s, "sub:k2", "b")
	defer l2.Close()
	if err := admin.Publish(ctx, "sub:k2", "b 6 1000").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.C():
	case <-time.After(3 * time.Second):
		t.Fatal("new listener after the reconnect got no notice")
	}
}

// Sharded, on a Cluster: after CLIENT KILL TYPE pubsub on every node, go-redis reconnects
// each slot's connection to the slot owner and resubscribes; notices still arrive.
func TestShardedNoticesAfterPubSubReconnect(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	be := newRedisBackend(rdb, &config{lease: time.Minute, retry: time.Second, prefix: "lockguard"})
	defer func() { _ = be.close() }()
	s := be.subs
	type lk struct {
		ch string
		l  listener
	}
	var ls []lk
	for i := range 6 {
		ch, slot := be.channel("kill-" + string(rune('a'+i)))
		l, err := s.listen(ctx, ch, slot, "o")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		select {
		case <-l.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("not confirmed")
		}
		ls = append(ls, lk{ch, l})
	}
	for _, n := range cl.Nodes() {
		c := n.Client(t)
		_ = c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
	}
	// Subscribed again: every listener is told to look (a hand-off may have been lost).
	for _, x := range ls {
		select {
		case n := <-x.l.C():
			if n.token != 0 {
				t.Errorf("%s: first notice after the kill %+v, want a look-again notice", x.ch, n)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: no look-again notice after the kill", x.ch)
		}
	}
	for i, x := range ls {
		want := int64(i + 1)
		if err := rdb.SPublish(ctx, x.ch, fmt.Sprintf("o %d 1000", want)).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-x.l.C():
			if n.token != want {
				t.Errorf("%s: notice %+v, want token %d", x.ch, n, want)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("%s: no notice after the kill", x.ch)
		}
	}
}

// After the idle close, the connection's goroutines (dispatch, go-redis receive loop and
// health check) are gone before close(); close with a linger pending leaves nothing behind.
func TestSubscriberLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	s := newSubscriber(rdb, false)
	l := mustListen(t, s, "sub:idle", "a")
	l.Close()
	time.Sleep(linger + idleClose + 2*time.Second)
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d connection(s) left after the idle close", n)
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left after the idle close: %v", err)
	}
	l = mustListen(t, s, "sub:idle2", "a")
	l.Close()
	s.close()
	goleak.VerifyNone(t, ignore)
}

func numSub(t *testing.T, rdb *redis.Client, channel string) int64 {
	t.Helper()
	v, err := rdb.PubSubNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v[channel]
}

func killPubSub(t *testing.T, rdb *redis.Client) {
	t.Helper()
	n, err := rdb.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("CLIENT KILL TYPE pubsub killed nothing")
	}
}

func mustListen(t *testing.T, s *subscriber, channel, owner string) listener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := s.listen(ctx, channel, 0, owner)
	if err != nil {
		t.Fatalf("listen %s: %v", channel, err)
	}
	select {
	case <-l.Ready():
	case <-time.After(5 * time.Second):
		t.Fatalf("listen %s: never confirmed", channel)
	}
	return l
}

// curState returns the current channel state of channel on slot 0, or nil.
func curState(s *subscriber, channel string) *chanState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conn := s.conns[0]; conn != nil {
		return conn.chans[channel]
	}
	return nil
}
