package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// chanListener is one wait's listener on a channel (see listener): the hand-off notices
// for its owner arrive on c; Ready and Gone follow the channel's subscription.
type chanListener struct {
	s       *subscriber
	conn    *psConn
	cs      *chanState
	channel string
	owner   string
	c       chan notice
	once    sync.Once
}

// C delivers the notices for the listener's owner.
func (l *chanListener) C() <-chan notice { return l.c }

// Ready is closed once Redis confirmed the channel's subscription.
func (l *chanListener) Ready() <-chan struct{} { return l.cs.ready }

// Gone is closed when the subscription's connection was lost, or its SUBSCRIBE failed: the
// wait listens anew.
func (l *chanListener) Gone() <-chan struct{} { return l.cs.gone }

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
