package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A channel listened to again just as its linger ended is unsubscribed and subscribed again
// in that order: the new listener is confirmed and hears what is published after that.
// Each round catches the unsubscribe as soon as it is decided, before or while it is sent.
func TestSubscribeAfterLingerIsKept(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSubscriber(rdb, false)
	defer s.close()

	const channel = "lockguard:{order}:ch"
	for round := range 3 {
		l, err := s.listen(ctx, channel, 0, "a")
		if err != nil {
			t.Fatal(err)
		}
		<-l.Ready()
		l.Close()
		for subscribed(s, channel) {
			time.Sleep(time.Millisecond)
		}
		l, err = s.listen(ctx, channel, 0, "a")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: subscription not confirmed", round)
		}
		// Published at once, and once more when anything sent before has long been done.
		for i, pause := range []time.Duration{0, 300 * time.Millisecond} {
			time.Sleep(pause)
			if err := rdb.Publish(ctx, channel, fmt.Sprintf("a %d 1000", i+1)).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case n := <-l.C():
				if n.token != int64(i+1) || n.lease != time.Second {
					t.Fatalf("round %d: notice %+v", round, n)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: message %d, published after the confirmation, was not delivered", round, i+1)
			}
		}
		l.Close()
	}
}

// subscribed reports whether s has channel among its subscriptions.
func subscribed(s *subscriber, channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn := s.conns[0]
	return conn != nil && conn.chans[channel] != nil
}
