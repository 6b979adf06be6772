package dlock

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// psConn is one pub/sub connection of a subscriber (one per hash slot on a Cluster) and
// the subscription changes queued, sent and awaiting confirmation on it. Guarded by the
// subscriber's mu.
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
			op.cs.lose() // for a listener listen returned before the send was over
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
// connection is dropped, with every change queued behind it, and its channels are lost (see
// lose); the next listener makes a new one. Returns the first subscribe's outcome.
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
	for _, cs := range conn.chans {
		cs.lose() // for the listeners listen returned before the send was over
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
		cs.lose()
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
