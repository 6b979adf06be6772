package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
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

// handOffOnce takes key with holder, queues waiter behind it and hands the lock over: the
// scripts are loaded and the channel subscribed, so a waiter that comes next listens before
// its first look.
func handOffOnce(t *testing.T, ctx context.Context, rdb *redis.Client, holder, waiter *dlock.Client, key string) {
	t.Helper()
	lk, got := queueBehind(t, ctx, rdb, holder, waiter, key)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := received(t, got).Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// takeOver receives the waiter's lock from got, checks that its token follows prev's, and
// releases it.
func takeOver(t *testing.T, ctx context.Context, got <-chan *dlock.Lock, prev *dlock.Lock) {
	t.Helper()
	lk := received(t, got)
	if lk.Token() <= prev.Token() {
		t.Fatalf("waiter's token %d is not above the releaser's %d", lk.Token(), prev.Token())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
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
	channel := redisName(key, "ch")
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
	handOffOnce(t, ctx, rdb, c, c, key)
	lk, got := queueBehind(t, ctx, rdb, c, c, key)
	if err := lk.Release(context.WithValue(ctx, loseReply{}, true)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("release with its reply lost: %v, want ErrUnavailable", err)
	}
	takeOver(t, ctx, got, lk)
	if n := rdb.Exists(ctx, redisName(key, "q")).Val(); n != 0 {
		t.Fatalf("line still exists after the hand-off and release")
	}
}

// replyLoser makes connections that lose the reply of the next command written that starts
// with match, once armed: the command runs in Redis, its reply is read off the socket and
// thrown away, and the connection reports EOF, as when it breaks between Redis's answer and
// the client. go-redis then sends the command again on a new connection (MaxRetries).
type replyLoser struct {
	mu    sync.Mutex
	match []byte
	hits  atomic.Int32
	// hold, when set as the reply is lost, keeps the connection's failure back until it is
	// closed: what happens meanwhile comes between the command's run and go-redis's retry.
	hold chan struct{}
}

func (f *replyLoser) arm(match string) {
	f.mu.Lock()
	f.match = []byte(match)
	f.mu.Unlock()
}

func (f *replyLoser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &replyLoserConn{Conn: c, f: f}, nil
}

type replyLoserConn struct {
	net.Conn
	f    *replyLoser
	lose atomic.Bool
	hold chan struct{} // see replyLoser.hold; set before lose
}

func (c *replyLoserConn) Write(p []byte) (int, error) {
	c.f.mu.Lock()
	if c.f.match != nil && bytes.HasPrefix(bytes.ToLower(p), c.f.match) {
		c.f.match = nil
		c.hold = c.f.hold
		c.lose.Store(true)
		c.f.hits.Add(1)
	}
	c.f.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *replyLoserConn) Read(p []byte) (int, error) {
	if c.lose.Load() {
		_, _ = c.Conn.Read(make([]byte, 64<<10)) // the reply: the command ran
		if c.hold != nil {
			<-c.hold
		}
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// releaseCall is how a release script call starts on the wire: EVALSHA with 4 keys and 5
// arguments (an acquisition's look sends 7, leaving the line 4).
const releaseCall = "*12\r\n$7\r\nevalsha\r\n"

// A release whose reply is lost on the wire is sent again by go-redis itself. The first run
// handed the lock to a waiter of the same Client without a message; the second finds the
// lock released by its caller, and names the holder again so that the Client tells it.
// Release returns nil: the caller sees an ordinary release. Without that, the waiter would
// hold the lock in Redis without knowing it, until its look an hour later.
func TestRetriedReleaseStillWakesOwnWaiter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := &replyLoser{}
	c := newClient(t, srv.Client(t, func(o *redis.Options) { o.Dialer = f.dial }), dlock.WithRetryInterval(time.Hour))
	other := newClient(t, rdb, dlock.WithRetryInterval(time.Hour))
	for _, tc := range []struct {
		name   string
		waiter *dlock.Client
	}{
		{"same Client", c},
		{"another Client", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			key := uniqueKey(t)
			handOffOnce(t, ctx, rdb, c, tc.waiter, key)
			lk, got := queueBehind(t, ctx, rdb, c, tc.waiter, key)
			f.arm(releaseCall)
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("release sent again after its reply was lost: %v", err)
			}
			if n := f.hits.Swap(0); n != 1 {
				t.Fatalf("the reply of %d release calls was lost, want 1", n)
			}
			takeOver(t, ctx, got, lk)
		})
	}
}

// A release whose reply is lost is sent again by go-redis; before the retry comes, the lock,
// handed to a waiter of another Client by the first run, was released by that waiter too.
// The retry must still answer released: Release returns nil, as for any release that went
// through. Before, r named only the last full release (the waiter's), and the retry answered
// that the lock was lost.
func TestRetriedReleaseAfterWaiterReleased(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := &replyLoser{}
	c := newClient(t, srv.Client(t, func(o *redis.Options) { o.Dialer = f.dial }), dlock.WithRetryInterval(time.Hour))
	other := newClient(t, rdb, dlock.WithRetryInterval(time.Hour))
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	handOffOnce(t, ctx, rdb, c, other, key)
	lk, got := queueBehind(t, ctx, rdb, c, other, key)

	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	f.arm(releaseCall)
	released := make(chan error, 1)
	go func() { released <- lk.Release(ctx) }()
	// The first run handed the lock over: the waiter has it, and releases it.
	if err := received(t, got).Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(hold) // the first run's reply is lost now: go-redis sends the release again
	if err := <-released; err != nil {
		t.Fatalf("release sent again after the lock went on and was released: %v, want nil", err)
	}
	if n := f.hits.Load(); n != 1 {
		t.Fatalf("the reply of %d release calls was lost, want 1", n)
	}
}
