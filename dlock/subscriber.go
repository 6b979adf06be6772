package dlock

import (
	"context"
	"errors"
	"slices"
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

	mu     sync.Mutex
	conns  map[int]*psConn
	closed bool
	wg     sync.WaitGroup
}

type psConn struct {
	slot  int
	ps    *redis.PubSub
	chans map[string]*chanState
	idle  *time.Timer

	queue []*subOp // subscription changes not yet sent, oldest first
	// sent holds, per channel, the states whose SUBSCRIBE went out (or is going out) on this
	// connection and is not confirmed yet, in the order sent: a confirmation belongs to the
	// oldest. A channel unsubscribed and subscribed again can have two, and the first one's
	// confirmation must not mark the second ready before its SUBSCRIBE reached Redis.
	sent    map[string][]*chanState
	sending bool // a goroutine is sending the queue
	made    bool // the first subscribe went through: the connection exists, dispatch runs
	dropped bool // taken out of conns (its first subscribe failed, idle, lost, or closed)
	// unsubs holds, per channel, the numbers (seq) of our unsubscribes sent and not yet
	// confirmed, oldest first: an unsubscribe confirmation beyond them is Redis dropping the
	// subscription itself. One whose confirmation was lost with a broken connection is
	// dropped once a later SUBSCRIBE of the channel is confirmed: Redis answers in order, so
	// no older confirmation can come after that one. Kept, it would take a later unsubscribe
	// by Redis (a Cluster node giving the slot away) for ours, and the channel's waiters
	// would not be told that their messages no longer come.
	unsubs map[string][]uint64
	seq    uint64 // the number of the last subscription change queued
	// dropErr is what ops still queued when the connection was dropped fail with.
	dropErr error
	// addr is, on a Cluster, the master of the slot as the client's layout named it when
	// the connection was dialled: the node go-redis bound it to.
	addr string
}

// subOp is one SUBSCRIBE (cs != nil) or UNSUBSCRIBE of a channel, queued on a connection.
type subOp struct {
	channel string
	seq     uint64 // order among the connection's changes
	cs      *chanState
	done    chan struct{} // closed once sent; err and at are set before
	err     error
	at      time.Time // when the send ended
}

type chanState struct {
	sub       *subOp // the subscribe that made this channel state
	ready     chan struct{}
	gone      chan struct{} // closed when the connection was lost: listen anew
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
	conn    *psConn
	cs      *chanState
	channel string
	owner   string
	c       chan notice
	once    sync.Once
}

func newSubscriber(rdb redis.UniversalClient, sharded bool) *subscriber {
	sends, stop := context.WithCancel(context.Background())
	return &subscriber{rdb: rdb, sharded: sharded, conns: map[int]*psConn{}, sends: sends, stopSends: stop}
}

// listen registers a listener of owner on channel, subscribing the channel first when this
// process does not listen to it yet. It waits for that SUBSCRIBE to be sent (not confirmed:
// the listener's Ready says when it is), or for ctx.
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

	select {
	case <-cs.sub.done:
	case <-ctx.Done():
		l.Close()
		return nil, unavailable("subscribe", ctx.Err())
	}
	if err := cs.sub.err; err != nil {
		l.Close()
		return nil, unavailable("subscribe", err)
	}
	return l, nil
}

// connLocked makes the pub/sub connection of a slot. Nothing is sent yet: the first queued
// subscribe dials it.
func (s *subscriber) connLocked(slot int) *psConn {
	var ps *redis.PubSub
	if s.sharded {
		ps = s.rdb.SSubscribe(context.Background())
	} else {
		ps = s.rdb.Subscribe(context.Background())
	}
	conn := &psConn{slot: slot, ps: ps, chans: map[string]*chanState{}, sent: map[string][]*chanState{},
		unsubs: map[string][]uint64{}, dropErr: ErrClosed}
	s.conns[slot] = conn
	return conn
}

// queueLocked queues op on conn and starts its sender if none runs.
func (s *subscriber) queueLocked(conn *psConn, op *subOp) {
	conn.seq++
	op.seq = conn.seq
	conn.queue = append(conn.queue, op)
	if conn.sending {
		return
	}
	conn.sending = true
	s.wg.Add(1)
	go s.send(conn)
}

// send sends the queued subscription changes of conn, in order, without holding mu; it
// returns when the queue is empty.
func (s *subscriber) send(conn *psConn) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if len(conn.queue) == 0 {
			conn.sending = false
			s.mu.Unlock()
			return
		}
		op := conn.queue[0]
		conn.queue = conn.queue[1:]
		dropped, first := conn.dropped, op.cs != nil && !conn.made
		if op.cs != nil && !dropped {
			conn.sent[op.channel] = append(conn.sent[op.channel], op.cs)
		}
		s.mu.Unlock()

		if dropped {
			s.mu.Lock()
			err := conn.dropErr
			s.mu.Unlock()
			op.finish(err)
			continue
		}
		ctx, cancel := context.WithTimeout(s.sends, sendTimeout)
		if first && s.sharded {
			addr := s.slotMaster(ctx, op.channel) // the node the dial below goes to
			s.mu.Lock()
			conn.addr = addr
			s.mu.Unlock()
		}
		err := s.sendOp(ctx, conn.ps, op)
		cancel()
		if first {
			err = s.connected(conn, err)
		} else if err != nil && op.cs != nil {
			s.mu.Lock()
			conn.unsent(op.cs)
			if conn.chans[op.channel] == op.cs {
				delete(conn.chans, op.channel)
				// go-redis keeps a channel whose SUBSCRIBE failed on its list, and subscribes
				// it again when it reconnects: take it off, in order with later changes.
				s.queueUnsubscribeLocked(conn, op.channel)
				s.idleLocked(conn)
			}
			s.mu.Unlock()
		}
		if op.cs != nil {
			s.mu.Lock()
			if s.closed {
				err = ErrClosed // whatever the send did, the connection is gone
			}
			s.mu.Unlock()
		}
		if err != nil && op.cs == nil {
			s.mu.Lock()
			conn.forgetUnsubscribes(op.channel, func(seq uint64) bool { return seq == op.seq }) // no confirmation will come for it
			s.mu.Unlock()
		}
		// An unsubscribe is best effort: a failed one only costs ignored messages until the
		// idle close.
		op.finish(err)
	}
}

// sendOp sends one (sharded, on a Cluster) SUBSCRIBE or UNSUBSCRIBE on ps.
func (s *subscriber) sendOp(ctx context.Context, ps *redis.PubSub, op *subOp) error {
	switch {
	case op.cs != nil && s.sharded:
		return ps.SSubscribe(ctx, op.channel)
	case op.cs != nil:
		return ps.Subscribe(ctx, op.channel)
	case s.sharded:
		return ps.SUnsubscribe(ctx, op.channel)
	default:
		return ps.Unsubscribe(ctx, op.channel)
	}
}

// connected records the outcome of the first subscribe of conn, the one that dialled it.
// The receive loop starts only now, after the channel was named: a Cluster client binds a
// sharded subscription's connection to the node that serves the first channel's slot, and to
// a random node when there is none yet (the subscription then gets MOVED, and is never
// confirmed). When the first subscribe failed, or the subscriber was closed meanwhile, the
// connection is dropped, with every change queued behind it; the next listener makes a new
// one. Returns the first subscribe's outcome.
func (s *subscriber) connected(conn *psConn, err error) error {
	s.mu.Lock()
	if err == nil && !conn.dropped {
		conn.made = true
		s.wg.Add(1)
		go s.dispatch(conn, conn.ps.ChannelWithSubscriptions(redis.WithChannelSize(256)))
		s.mu.Unlock()
		return nil
	}
	if err == nil || s.closed {
		err = ErrClosed // closed meanwhile: the dial was cancelled, or its connection is gone
	}
	s.dropLocked(conn)
	queued := conn.queue
	conn.queue = nil
	s.mu.Unlock()
	for _, op := range queued {
		op.finish(err)
	}
	_ = conn.ps.Close()
	return err
}

// unsent takes a channel state off the list of those awaiting confirmation: its SUBSCRIBE
// failed, or the state ended (unsubscribed) before a confirmation came.
func (c *psConn) unsent(cs *chanState) {
	channel := cs.sub.channel
	sent := c.sent[channel]
	if i := slices.Index(sent, cs); i >= 0 {
		sent = slices.Delete(sent, i, i+1)
	}
	if len(sent) == 0 {
		delete(c.sent, channel)
	} else {
		c.sent[channel] = sent
	}
}

// confirmed marks ready the channel state that a subscribe confirmation is for: the oldest
// one sent and unconfirmed. A confirmation with none is go-redis subscribing the
// connection's channels again after a reconnect: it is for the current state, if its
// SUBSCRIBE went out. If that state was ready already, a hand-off published while the
// connection was down was lost with its message: the channel's waiters look again now, and
// the one it was handed to finds it, instead of at its next look a retry interval later.
func (c *psConn) confirmed(channel string) {
	var cs *chanState
	if sent := c.sent[channel]; len(sent) > 0 {
		cs = sent[0]
		if len(sent) == 1 {
			delete(c.sent, channel)
		} else {
			c.sent[channel] = sent[1:]
		}
		// Redis answers in order: an unsubscribe sent before this SUBSCRIBE and still
		// unconfirmed was lost with a broken connection.
		c.forgetUnsubscribes(channel, func(seq uint64) bool { return seq < cs.sub.seq })
	} else if cur := c.chans[channel]; cur != nil && cur.sub.sentOK() {
		cs = cur
	}
	if cs == nil {
		return
	}
	select {
	case <-cs.ready:
		cs.lookAgain()
	default:
		close(cs.ready)
	}
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

// sentOK reports whether op was sent without error.
func (op *subOp) sentOK() bool {
	select {
	case <-op.done:
		return op.err == nil
	default:
		return false
	}
}

// finish records the outcome of a sent op.
func (op *subOp) finish(err error) {
	op.err, op.at = err, time.Now()
	close(op.done)
}

// confirmGrace is how long after a SUBSCRIBE was sent its confirmation is still expected. A
// channel is not unsubscribed while its confirmation is expected: see unsubscribe.
const confirmGrace = sendTimeout

// confirmDueIn is how long the confirmation of a sent or queued SUBSCRIBE is still to be
// expected: confirmGrace after its send ended, and linger (then again) while it is unsent.
func (op *subOp) confirmDueIn() time.Duration {
	if !isClosed(op.done) {
		return linger
	}
	return time.Until(op.at.Add(confirmGrace))
}

// dropLocked takes conn out of use: later listeners of its slot make a new connection.
func (s *subscriber) dropLocked(conn *psConn) {
	conn.dropped = true
	if s.conns[conn.slot] == conn {
		delete(s.conns, conn.slot)
	}
	if conn.idle != nil {
		conn.idle.Stop()
		conn.idle = nil
	}
	for _, cs := range conn.chans {
		cs.keep()
	}
	conn.chans = map[string]*chanState{}
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

func (l *chanListener) C() <-chan notice       { return l.c }
func (l *chanListener) Ready() <-chan struct{} { return l.cs.ready }
func (l *chanListener) Gone() <-chan struct{}  { return l.cs.gone }

// Unconfirmed drops the listener's connection as lost (see lostLocked) when its
// subscription, sent without error, is still unconfirmed and the connection is bound to a
// node that, by the Cluster's layout of now, no longer serves the slot. A subscription that
// is only slow to be confirmed (a busy or paused server) keeps its connection. On a single
// server or behind Sentinel it does nothing.
func (l *chanListener) Unconfirmed() {
	s := l.s
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || !s.sharded {
		return
	}
	s.mu.Lock()
	pending := l.conn.chans[l.channel] == l.cs && l.cs.sub.sentOK() && !isClosed(l.cs.ready)
	addr := l.conn.addr
	s.mu.Unlock()
	if !pending {
		return
	}
	cc.ReloadState(context.Background()) // in the background: for this check or the next
	ctx, cancel := context.WithTimeout(s.sends, sendTimeout)
	now := s.slotMaster(ctx, l.channel)
	cancel()
	if now == "" || now == addr {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.conn.chans[l.channel] == l.cs && !isClosed(l.cs.ready) {
		s.lostLocked(l.conn)
	}
}

// slotMaster is the address of the master of channel's slot in the Cluster client's layout,
// or "" when there is none.
func (s *subscriber) slotMaster(ctx context.Context, channel string) string {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(ctx, channel)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Close stops the listener; the channel is unsubscribed linger after its last listener left,
// unless a new one comes first.
func (l *chanListener) Close() {
	l.once.Do(func() {
		s, conn, cs := l.s, l.conn, l.cs
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(cs.listeners, l)
		if conn.chans[l.channel] != cs || len(cs.listeners) > 0 || cs.linger != nil {
			return
		}
		cs.linger = time.AfterFunc(linger, func() { s.unsubscribe(conn, l.channel, cs) })
	})
}

// unsubscribe ends the subscription of a channel that stayed without listener for linger.
func (s *subscriber) unsubscribe(conn *psConn, channel string, cs *chanState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || conn.dropped || conn.chans[channel] != cs || len(cs.listeners) > 0 {
		return
	}
	// A subscription whose confirmation is still to come is kept: after an UNSUBSCRIBE,
	// that confirmation could not be told from the one of the channel's next SUBSCRIBE, and
	// would mark the next state ready before Redis has it (Redis answers in order, but the
	// next SUBSCRIBE may have joined the list by then). A listener that comes meanwhile uses
	// the kept subscription.
	if !isClosed(cs.ready) {
		if d := cs.sub.confirmDueIn(); d > 0 {
			cs.linger = time.AfterFunc(d, func() { s.unsubscribe(conn, channel, cs) })
			return
		}
	}
	delete(conn.chans, channel)
	// A state still unconfirmed confirmGrace after its SUBSCRIBE lost its confirmation (a
	// connection that stopped delivering, then reconnected: go-redis subscribes again only
	// the channels it still has). Left on the list, it would take the confirmation of the
	// channel's next SUBSCRIBE, whose listeners would then never be ready. A confirmation
	// later still (Redis paused for longer) may then mark the next state ready a moment
	// early: a wait then relies on its next look, as when a message is lost.
	conn.unsent(cs)
	s.queueUnsubscribeLocked(conn, channel)
	s.idleLocked(conn)
}

// queueUnsubscribeLocked queues an unsubscribe of channel on conn, noting it so that its
// confirmation is told from Redis dropping the subscription.
func (s *subscriber) queueUnsubscribeLocked(conn *psConn, channel string) {
	op := &subOp{channel: channel, done: make(chan struct{})}
	s.queueLocked(conn, op)
	conn.unsubs[channel] = append(conn.unsubs[channel], op.seq)
}

// unsubscribed counts off the oldest of our unsubscribes of channel still to be confirmed;
// it reports false when none was.
func (c *psConn) unsubscribed(channel string) bool {
	q := c.unsubs[channel]
	if len(q) == 0 {
		return false
	}
	oldest := q[0]
	c.forgetUnsubscribes(channel, func(seq uint64) bool { return seq == oldest })
	return true
}

// forgetUnsubscribes drops our unsubscribes of channel that drop reports true for: no
// confirmation will come for them.
func (c *psConn) forgetUnsubscribes(channel string, drop func(seq uint64) bool) {
	left := slices.DeleteFunc(c.unsubs[channel], drop)
	if len(left) == 0 {
		delete(c.unsubs, channel)
	} else {
		c.unsubs[channel] = left
	}
}

// lostLocked drops conn because Redis no longer delivers its channels' messages: it ended a
// subscription we did not end (a Cluster node that gave the slot away to another master in
// a resharding does so), or a subscription went unconfirmed on a connection bound to a node
// that no longer serves the slot (go-redis binds a sharded subscription to the node its
// cluster layout named when it dialled, and swallows a MOVED reply to SSUBSCRIBE). The
// channels' listeners are told (Gone) and listen anew, on a new connection; on a Cluster the
// client first reloads its layout, so that connection goes to the slot's master of now.
func (s *subscriber) lostLocked(conn *psConn) {
	if conn.dropped {
		return
	}
	lost := make([]*chanState, 0, len(conn.chans))
	for _, cs := range conn.chans {
		lost = append(lost, cs)
	}
	s.dropLocked(conn)
	conn.dropErr = errSubscriptionLost
	for _, cs := range lost {
		close(cs.gone)
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background()) // in the background
	}
	s.wg.Add(1)
	go func() { // not from dispatch itself: Close waits for the channel it reads to drain
		defer s.wg.Done()
		_ = conn.ps.Close()
	}()
}

// errSubscriptionLost fails subscription changes still queued on a connection that was lost.
var errSubscriptionLost = errors.New("pub/sub subscription lost")

// idleLocked closes conn after idleClose unless a new listener arrives first.
func (s *subscriber) idleLocked(conn *psConn) {
	if len(conn.chans) > 0 || conn.idle != nil || conn.dropped {
		return
	}
	conn.idle = time.AfterFunc(idleClose, func() {
		s.mu.Lock()
		if conn.dropped || len(conn.chans) > 0 {
			s.mu.Unlock()
			return
		}
		s.dropLocked(conn)
		s.mu.Unlock()
		_ = conn.ps.Close()
	})
}

// close closes every connection and waits for its goroutines to return.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	s.stopSends()
	var drop []*psConn
	for _, conn := range s.conns {
		s.dropLocked(conn)
		drop = append(drop, conn)
	}
	s.mu.Unlock()
	for _, conn := range drop {
		_ = conn.ps.Close()
	}
	s.wg.Wait()
}
