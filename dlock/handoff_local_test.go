package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// firstMessage publishes a sentinel on channel and returns the first message ps receives:
// a message published before the sentinel comes first, as Redis delivers in order.
func firstMessage(t *testing.T, ctx context.Context, rdb *redis.Client, ps *redis.PubSub, channel string) string {
	t.Helper()
	if err := rdb.Publish(ctx, channel, "sentinel").Err(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg, ok := m.(*redis.Message); ok {
			return msg.Payload
		}
	}
}

// A release that hands the lock to a waiter of the same Client tells that waiter itself and
// publishes nothing; a hand-off to another Client's waiter goes by message. The retry
// interval is an hour: only a notice gets a waiter the lock within the test.
func TestHandOffToOwnWaiterPublishesNothing(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithRetryInterval(time.Hour))
	other := newClient(t, rdb, dlock.WithRetryInterval(time.Hour))
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	channel := "lockguard:{" + key + "}:ch"
	ps := rdb.Subscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		waiter    *dlock.Client
		published bool
	}{
		{"same Client", c, false},
		{"another Client", other, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lk, got := queueBehind(t, ctx, rdb, c, tc.waiter, key)
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l2 := received(t, got)
			defer func() { _ = l2.Release(ctx) }()
			if l2.Token() <= lk.Token() {
				t.Fatalf("waiter's token %d is not above the releaser's %d", l2.Token(), lk.Token())
			}
			first := firstMessage(t, ctx, rdb, ps, channel)
			if tc.published == (first == "sentinel") {
				t.Fatalf("first message on the channel after the hand-off: %q; want a hand-off message: %v", first, tc.published)
			}
			if tc.published && !strings.Contains(first, " ") {
				t.Fatalf("hand-off message %q is not \"<owner> <token> <lease>\"", first)
			}
		})
	}
}

// lostReply runs commands but answers an error instead of the reply of every script call
// whose context carries loseReply: the script ran in Redis, its caller cannot know. An error
// reply (NOSCRIPT, on which go-redis sends the script itself) passes, and so do the commands
// that set up a new connection.
type lostReply struct{}

type loseReply struct{}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		script := cmd.Name() == "evalsha" || cmd.Name() == "eval"
		if script && err == nil && ctx.Value(loseReply{}) != nil {
			return errors.New("connection reset by peer (simulated lost reply)")
		}
		return err
	}
}
func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A release whose reply is lost may have handed the lock to a waiter of the same Client,
// which no message tells: the Client tells its waiters on the key to look again, and the one
// it was handed to finds it at once, not at its next look an hour later.
func TestLostReleaseReplyStillWakesOwnWaiter(t *testing.T) {
	srv, rdb, _ := setup(t)
	h := &lostReply{}
	hooked := srv.Client(t)
	hooked.AddHook(h)
	c := newClient(t, hooked, dlock.WithRetryInterval(time.Hour))
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	// A wait on the key first, so that the channel is subscribed: the next waiter listens
	// before its first look, and is waiting for a notice once it is in line.
	lk, got := queueBehind(t, ctx, rdb, c, c, key)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := received(t, got).Release(ctx); err != nil {
		t.Fatal(err)
	}

	lk, got = queueBehind(t, ctx, rdb, c, c, key)
	if err := lk.Release(context.WithValue(ctx, loseReply{}, true)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("release with its reply lost: %v, want ErrUnavailable", err)
	}
	l2 := received(t, got)
	if l2.Token() <= lk.Token() {
		t.Fatalf("waiter's token %d is not above the releaser's %d", l2.Token(), lk.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "lockguard:{"+key+"}:q").Val(); n != 0 {
		t.Fatalf("line still exists after the hand-off and release")
	}
}
