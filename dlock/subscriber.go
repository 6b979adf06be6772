package dlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// idleClose is how long an unused pub/sub connection is kept for the next wait.
const idleClose = 10 * time.Second

// linger is how long a channel stays subscribed after its last local listener left (longer
// while its confirmation is still to come: see unsubscribe). A waiter on the same key soon
// after (a loop that takes the same lock again, a second worker on the same resource) finds
// the subscription confirmed: it registers before its first look and needs no subscribe,
// confirmation and second look.
const linger = time.Second

// sendTimeout bounds one SUBSCRIBE or UNSUBSCRIBE, the dial of a new connection included.
const sendTimeout = 5 * time.Second

// subscriber shares one pub/sub connection among all waiters of a Client (one per hash slot
// on a Cluster, where sharded pub/sub is bound to the slot's node). A channel is subscribed
// while at least one local waiter listens on it, and for linger after the last one left.
//
// mu guards the maps and timers only and is never held across a call to Redis: a slow or
// unreachable node delays the waiters that subscribe through it, not the hand-offs, messages
// and listeners of other channels. The subscriptions a connection is to change are decided
// under mu, queued in that order, and sent in that order by one goroutine per connection, so
// an unsubscribe and a new subscribe of the same channel reach Redis as they were decided.
type subscriber struct {
	rdb     redis.UniversalClient
	sharded bool
	// sends is the parent of every SUBSCRIBE and UNSUBSCRIBE's context: close cancels it, so
	// a dial in flight does not hold up Close.
	sends     context.Context
	stopSends context.CancelFunc

	// sendWait bounds how long listen waits for its SUBSCRIBE to be sent (0: no bound): a
	// waiter makes no looks meanwhile, and looks are what keep its place in line alive.
	sendWait time.Duration

	mu     sync.Mutex
	conns  map[int]*psConn
	closed bool
	wg     sync.WaitGroup
}

// chanState is one subscription of a channel on a connection: made by its SUBSCRIBE, ready
// when Redis confirmed it, gone when the connection was lost or the SUBSCRIBE failed.
type chanState struct {
	sub       *subOp // the subscribe that made this channel state
	ready     chan struct{}
	gone      chan struct{} // closed (by lose) when no message will come: listen anew
	listeners map[*chanListener]struct{}
	linger    *time.Timer // set while the channel has no listener; ends the subscription
}

// lose tells the channel's listeners that its messages will not come (the connection was
// lost, or the SUBSCRIBE failed): they listen anew. Called with the subscriber's mu held.
func (cs *chanState) lose() {
	if !isClosed(cs.gone) {
		close(cs.gone)
	}
}

// keep cancels a pending unsubscribe: the channel has a listener again.
func (cs *chanState) keep() {
	if cs.linger != nil {
		cs.linger.Stop()
		cs.linger = nil
	}
}

func newSubscriber(rdb redis.UniversalClient, sharded bool) *subscriber {
	sends, stop := context.WithCancel(context.Background())
	return &subscriber{rdb: rdb, sharded: sharded, conns: map[int]*psConn{}, sends: sends, stopSends: stop}
}

// listen registers a listener of owner on channel, subscribing the channel first when this
// process does not listen to it yet. It waits for that SUBSCRIBE to be sent (not confirmed:
// the listener's Ready says when it is), or for ctx, or for sendWait: a send still under way
// then (a slow dial) goes on, and the listener is returned, not ready, so that its waiter
// looks at the lock meanwhile. If that send fails, the listener never gets ready, and its
// Gone is closed: its waiter listens anew.
func (s *subscriber) listen(ctx context.Context, channel string, slot int, owner string) (listener, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	conn := s.conns[slot]
	if conn == nil {
		conn = s.connLocked(slot)
	}
	if conn.idle != nil {
		conn.idle.Stop()
		conn.idle = nil
	}
	cs := conn.chans[channel]
	if cs == nil {
		cs = &chanState{ready: make(chan struct{}), gone: make(chan struct{}), listeners: map[*chanListener]struct{}{}}
		cs.sub = &subOp{channel: channel, cs: cs, done: make(chan struct{})}
		conn.chans[channel] = cs
		s.queueLocked(conn, cs.sub)
	}
	cs.keep()
	l := s.addLocked(conn, cs, channel, owner)
	s.mu.Unlock()

	var bound <-chan time.Time
	if s.sendWait > 0 {
		t := time.NewTimer(s.sendWait)
		defer t.Stop()
		bound = t.C
	}
	select {
	case <-cs.sub.done:
	case <-ctx.Done():
		l.Close()
		return nil, unavailable("subscribe", ctx.Err())
	case <-bound:
		return l, nil
	}
	if err := cs.sub.err; err != nil {
		l.Close()
		return nil, unavailable("subscribe", err)
	}
	return l, nil
}

// lookAgain tells every listener of cs to look at its lock now: a notice without a token.
func (cs *chanState) lookAgain() {
	for l := range cs.listeners {
		select {
		case l.c <- notice{}:
		default: // a notice is pending already: the waiter acts on it
		}
	}
}

// addLocked registers a listener of owner on a channel's state.
func (s *subscriber) addLocked(conn *psConn, cs *chanState, channel, owner string) *chanListener {
	l := &chanListener{s: s, conn: conn, cs: cs, channel: channel, owner: owner, c: make(chan notice, 4)}
	cs.listeners[l] = struct{}{}
	return l
}

// subscribed reports whether any pub/sub connection is open: listenReady finds nothing
// otherwise.
func (s *subscriber) subscribed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns) > 0
}

// listenReady registers a listener only if channel is subscribed and confirmed already.
func (s *subscriber) listenReady(channel string, slot int, owner string) listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn := s.conns[slot]
	if s.closed || conn == nil {
		return nil
	}
	cs := conn.chans[channel]
	if cs == nil {
		return nil
	}
	select {
	case <-cs.ready:
	default:
		return nil
	}
	cs.keep()
	return s.addLocked(conn, cs, channel, owner)
}

// deliver hands a notice to the local listeners of owner on channel, as a message would. It
// reports whether there was one.
func (s *subscriber) deliver(channel string, slot int, owner string, n notice) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conn := s.conns[slot]; conn != nil {
		return s.notifyLocked(conn, channel, owner, n)
	}
	return false
}

// lookAgain tells every local listener on channel to look at its lock now.
func (s *subscriber) lookAgain(channel string, slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conn := s.conns[slot]; conn != nil {
		if cs := conn.chans[channel]; cs != nil {
			cs.lookAgain()
		}
	}
}

// notifyLocked hands n to the listeners of owner on channel; it reports whether there was one.
func (s *subscriber) notifyLocked(conn *psConn, channel, owner string, n notice) bool {
	cs := conn.chans[channel]
	if cs == nil {
		return false
	}
	found := false
	for l := range cs.listeners {
		if l.owner == owner {
			found = true
			select {
			case l.c <- n:
			default:
			}
		}
	}
	return found
}

// parseNotice reads a hand-off message: "<owner> <token> <lease ms>", or "<owner> 0" (look
// again).
func parseNotice(payload string) (owner string, n notice, ok bool) {
	f := strings.Fields(payload)
	if len(f) < 2 {
		return "", notice{}, false
	}
	token, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", notice{}, false
	}
	n.token = token
	if len(f) > 2 {
		if ms, err := strconv.ParseInt(f[2], 10, 64); err == nil && ms > 0 {
			n.lease = time.Duration(ms) * time.Millisecond
		}
	}
	return f[0], n, true
}

// dispatch routes messages of one connection to the listeners of their owner.
func (s *subscriber) dispatch(conn *psConn, msgs <-chan any) {
	defer s.wg.Done()
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			s.mu.Lock()
			switch m.Kind {
			case "subscribe", "ssubscribe":
				conn.confirmed(m.Channel)
			case "unsubscribe", "sunsubscribe":
				// Not ours: Redis ended it. Only a Cluster node does, for the shard channels
				// of a slot it gave away; on one server such a confirmation is one of ours
				// that a late confirmation put out of step (see unsubscribe), and the
				// connection is healthy.
				if !conn.unsubscribed(m.Channel) && s.sharded && conn.chans[m.Channel] != nil {
					s.lostLocked(conn)
				}
			}
			s.mu.Unlock()
		case *redis.Message:
			owner, n, ok := parseNotice(m.Payload)
			if !ok {
				continue
			}
			s.mu.Lock()
			s.notifyLocked(conn, m.Channel, owner, n)
			s.mu.Unlock()
		}
	}
}

// close closes every connection and waits for its goroutines to return.
func (s *subscriber) close() { s.closeUntil(nil) }

// closeUntil is close, waiting only until expired is closed (nil: for as long as it takes).
// Each connection is closed on a goroutine of its own: go-redis closes one only once a
// SUBSCRIBE in flight on it is over, and one that dials it waits for the answer to its
// handshake, which only the client's ReadTimeout bounds.
func (s *subscriber) closeUntil(expired <-chan struct{}) {
	s.mu.Lock()
	s.closed = true
	s.stopSends()
	for _, conn := range s.conns {
		s.dropLocked(conn)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = conn.ps.Close()
		}()
	}
	s.mu.Unlock()
	waitUntil(s.wg.Wait, expired)
}
