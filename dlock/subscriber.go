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

// linger is how long a channel stays subscribed after its last local listener left. A waiter
// on the same key soon after (a loop that takes the same lock again, a second worker on the
// same resource) finds the subscription confirmed: it registers before its first look and
// needs no subscribe, confirmation and second look.
const linger = time.Second

// subscriber shares one pub/sub connection among all waiters of a Client (one per hash slot
// on a Cluster, where sharded pub/sub is bound to the slot's node). A channel is subscribed
// while at least one local waiter listens on it, and for linger after the last one left.
type subscriber struct {
	rdb     redis.UniversalClient
	sharded bool

	mu     sync.Mutex
	conns  map[int]*psConn
	closed bool
	wg     sync.WaitGroup
}

type psConn struct {
	ps    *redis.PubSub
	chans map[string]*chanState
	idle  *time.Timer
}

type chanState struct {
	ready     chan struct{}
	listeners map[*chanListener]struct{}
	linger    *time.Timer // set while the channel has no listener; ends the subscription
}

// keep cancels a pending unsubscribe: the channel has a listener again.
func (cs *chanState) keep() {
	if cs.linger != nil {
		cs.linger.Stop()
		cs.linger = nil
	}
}

type chanListener struct {
	s       *subscriber
	slot    int
	channel string
	owner   string
	ready   chan struct{}
	c       chan notice
	once    sync.Once
}

func newSubscriber(rdb redis.UniversalClient, sharded bool) *subscriber {
	return &subscriber{rdb: rdb, sharded: sharded, conns: map[int]*psConn{}}
}

func (s *subscriber) listen(ctx context.Context, channel string, slot int, owner string) (listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	conn := s.conns[slot]
	if conn == nil {
		return s.connectLocked(ctx, channel, slot, owner)
	}
	if conn.idle != nil {
		conn.idle.Stop()
		conn.idle = nil
	}
	cs := conn.chans[channel]
	if cs == nil {
		if err := s.subscribe(ctx, conn.ps, channel); err != nil {
			s.idleLocked(slot, conn)
			return nil, unavailable("subscribe", err)
		}
		cs = conn.add(channel)
	}
	cs.keep()
	return s.addLocked(cs, channel, slot, owner), nil
}

// connectLocked opens the pub/sub connection of a slot with its first channel. The channel
// is named when the connection is made, before anything reads from it: a Cluster client binds
// a sharded subscription's connection to the node that serves the first channel's slot, and
// to a random node when there is none yet (the subscription then gets MOVED, and is never
// confirmed).
func (s *subscriber) connectLocked(ctx context.Context, channel string, slot int, owner string) (listener, error) {
	var ps *redis.PubSub
	if s.sharded {
		ps = s.rdb.SSubscribe(ctx)
	} else {
		ps = s.rdb.Subscribe(ctx)
	}
	if err := s.subscribe(ctx, ps, channel); err != nil {
		_ = ps.Close()
		return nil, unavailable("subscribe", err)
	}
	conn := &psConn{ps: ps, chans: map[string]*chanState{}}
	cs := conn.add(channel)
	s.conns[slot] = conn
	s.wg.Add(1)
	go s.dispatch(slot, conn, ps.ChannelWithSubscriptions(redis.WithChannelSize(256)))
	return s.addLocked(cs, channel, slot, owner), nil
}

// subscribe sends the (sharded, on a Cluster) subscription of channel on ps.
func (s *subscriber) subscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	if s.sharded {
		return ps.SSubscribe(ctx, channel)
	}
	return ps.Subscribe(ctx, channel)
}

// add records a channel subscribed on conn, not yet confirmed.
func (c *psConn) add(channel string) *chanState {
	cs := &chanState{ready: make(chan struct{}), listeners: map[*chanListener]struct{}{}}
	c.chans[channel] = cs
	return cs
}

// addLocked registers a listener of owner on a channel's state.
func (s *subscriber) addLocked(cs *chanState, channel string, slot int, owner string) *chanListener {
	l := &chanListener{s: s, slot: slot, channel: channel, owner: owner, ready: cs.ready, c: make(chan notice, 4)}
	cs.listeners[l] = struct{}{}
	return l
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
	return s.addLocked(cs, channel, slot, owner)
}

// deliver hands a notice to the local listeners of owner on channel, as a message would.
func (s *subscriber) deliver(channel string, slot int, owner string, n notice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conn := s.conns[slot]; conn != nil {
		s.notifyLocked(conn, channel, owner, n)
	}
}

func (s *subscriber) notifyLocked(conn *psConn, channel, owner string, n notice) {
	cs := conn.chans[channel]
	if cs == nil {
		return
	}
	for l := range cs.listeners {
		if l.owner == owner {
			select {
			case l.c <- n:
			default:
			}
		}
	}
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
func (s *subscriber) dispatch(slot int, conn *psConn, msgs <-chan any) {
	defer s.wg.Done()
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			s.mu.Lock()
			if cs := conn.chans[m.Channel]; cs != nil {
				select {
				case <-cs.ready:
				default:
					close(cs.ready)
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

func (l *chanListener) C() <-chan notice       { return l.c }
func (l *chanListener) Ready() <-chan struct{} { return l.ready }

// Close stops the listener; the channel is unsubscribed linger after its last listener left,
// unless a new one comes first.
func (l *chanListener) Close() {
	l.once.Do(func() {
		s := l.s
		s.mu.Lock()
		defer s.mu.Unlock()
		conn := s.conns[l.slot]
		if conn == nil {
			return
		}
		cs := conn.chans[l.channel]
		if cs == nil {
			return
		}
		delete(cs.listeners, l)
		if len(cs.listeners) > 0 || cs.linger != nil {
			return
		}
		cs.linger = time.AfterFunc(linger, func() { s.unsubscribe(l.slot, conn, l.channel, cs) })
	})
}

// unsubscribe ends the subscription of a channel that stayed without listener for linger.
func (s *subscriber) unsubscribe(slot int, conn *psConn, channel string, cs *chanState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || conn.chans[channel] != cs || len(cs.listeners) > 0 {
		return
	}
	delete(conn.chans, channel)
	// Best effort: a failed unsubscribe only costs ignored messages until the idle close.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	unsubscribe := conn.ps.Unsubscribe
	if s.sharded {
		unsubscribe = conn.ps.SUnsubscribe
	}
	_ = unsubscribe(ctx, channel)
	cancel()
	s.idleLocked(slot, conn)
}

// idleLocked closes conn after idleClose unless a new listener arrives first.
func (s *subscriber) idleLocked(slot int, conn *psConn) {
	if len(conn.chans) > 0 || conn.idle != nil {
		return
	}
	conn.idle = time.AfterFunc(idleClose, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.conns[slot] == conn && len(conn.chans) == 0 {
			delete(s.conns, slot)
			_ = conn.ps.Close()
		}
	})
}

// close closes every connection and waits for the dispatchers to return.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	for slot, conn := range s.conns {
		if conn.idle != nil {
			conn.idle.Stop()
		}
		for _, cs := range conn.chans {
			cs.keep()
		}
		_ = conn.ps.Close()
		delete(s.conns, slot)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
