package dlock

// SubscriptionState is what a Client's subscriber holds for the hand-off channel of a lock
// key: for the tests of package dlock_test, which cannot see it otherwise (see
// SubscriptionOf).
type SubscriptionState struct {
	// Subscribed: the channel has a state on its pub/sub connection (its SUBSCRIBE queued or
	// sent, the subscription not ended).
	Subscribed bool
	// Ready: Redis confirmed that state's SUBSCRIBE (its listeners' Ready is closed).
	Ready bool
	// Unconfirmed is the number of the channel's states whose SUBSCRIBE went out and whose
	// confirmation is still awaited (psConn.sent): a confirmation that comes belongs to the
	// oldest of them.
	Unconfirmed int
}

// channelConn returns c's subscriber, key's hand-off channel and the pub/sub connection
// that serves it (nil when there is none), read with s.mu held: the caller holds it on
// return and unlocks it. who names the caller in the panic of a Client not on Redis.
func channelConn(c *Client, key, who string) (s *subscriber, ch string, conn *psConn) {
	b, ok := c.be.(*redisBackend)
	if !ok {
		panic(who + ": the Client's store is not Redis")
	}
	ch, slot := b.channel(key)
	s = b.subs
	s.mu.Lock()
	return s, ch, s.conns[slot]
}

// SubscriptionOf returns what c's subscriber holds for key's hand-off channel.
func SubscriptionOf(c *Client, key string) SubscriptionState {
	s, ch, conn := channelConn(c, key, "SubscriptionOf")
	defer s.mu.Unlock()
	var st SubscriptionState
	if conn == nil {
		return st
	}
	if cs := conn.chans[ch]; cs != nil {
		st.Subscribed, st.Ready = true, isClosed(cs.ready)
	}
	st.Unconfirmed = len(conn.sent[ch])
	return st
}

// SubscriptionFate is what became of a subscription taken by WatchSubscription.
type SubscriptionFate int

const (
	// SubscriptionHeld: it is still the channel's subscription on its connection.
	SubscriptionHeld SubscriptionFate = iota
	// SubscriptionLost: Redis ended it (a Cluster node giving the slot away) or its
	// connection was lost: the connection was dropped and its listeners told to listen anew.
	SubscriptionLost
	// SubscriptionEnded: this process ended it (unsubscribed after its linger, or its
	// connection closed as idle or at Close).
	SubscriptionEnded
)

// WatchSubscription takes the subscription c's subscriber holds now for key's hand-off
// channel and returns a func that says what has become of it since; ok is false when there
// is none.
func WatchSubscription(c *Client, key string) (fate func() SubscriptionFate, ok bool) {
	s, ch, conn := channelConn(c, key, "WatchSubscription")
	defer s.mu.Unlock()
	if conn == nil || conn.chans[ch] == nil {
		return nil, false
	}
	cs := conn.chans[ch]
	return func() SubscriptionFate {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case isClosed(cs.gone):
			return SubscriptionLost
		case conn.dropped || conn.chans[ch] != cs:
			return SubscriptionEnded
		}
		return SubscriptionHeld
	}, true
}
