// Package dlock is a distributed lock on Redis for work that must not run twice at once:
// charging a card, deducting a balance, running a job on one replica.
//
//	locks := dlock.New(rdb) // rdb: *redis.Client, *redis.ClusterClient or a failover client
//	defer locks.Close()
//
//	lock, err := locks.Acquire(ctx, "account:42") // waits (WithMaxWait bounds it); TryAcquire does not
//	if err != nil {
//		return err
//	}
//	defer lock.Release(ctx)
//	ctx = dlock.WithLock(ctx, lock) // cancelled if the lock is lost; carries it for re-entry
//	return deduct(ctx, lock.Token()) // pass the fencing token to the store
//
// # What it does
//
//   - Acquire and Release are one Lua script each: one round trip when the lock is free.
//   - Ownership is a random UUID per acquisition (its first 8 bytes are the Client's, shared by
//     all its acquisitions). Release, Refresh and Complete check it in the same script that
//     acts, so nobody frees a lock they do not hold.
//   - Waiters queue in Redis in arrival order. The release script hands the lock straight to
//     the first live waiter and tells it with one pub/sub message (sharded on a Cluster), so a
//     waiter is not starved by a holder re-acquiring in a loop, and needs no extra round trip.
//     A waiter of the releasing Client is told by the release's reply instead, with no
//     message. A waiter whose subscription cannot be made looks at the lock every retry
//     interval and subscribes again after its looks; one whose subscription is lost looks at
//     once and subscribes again after that look.
//     A waiter that stops heartbeating (its process died) is dropped after three retry
//     intervals; a waiter whose context ends (or WithMaxWait runs out) is out of line when its
//     Acquire returns (if Redis does not answer that within 100 ms, Acquire returns anyway
//     and the place is given up in the background), and one whose Client closes before Close
//     returns (with a go-redis client without ReadTimeout, Close gives up on a Redis that
//     does not answer after at most 10 s, and the place expires by itself; an acquisition
//     whose look Redis does not answer returns ErrClosed at Close); a waiter paused
//     past the short lease of a hand-off, which then went on, ignores the stale message and
//     queues again. An acquisition that failed leaves no lock
//     behind though its look may have taken one (its reply lost, or its script reaching Redis
//     after the caller's deadline): its clean-up is tried again until Redis answers, and a
//     look arriving after the clean-up takes nothing (unless someone else held the lock at
//     the clean-up and that holder's lease ended before the look came: see docs/dlock.md).
//   - Locks without WithTTL are renewed by one watchdog loop per Client, every lease/3, many
//     locks per script call, pipelined (one pipeline per node on a Cluster, whose answers
//     count as they come, so a node that does not answer costs only its own locks). The loop
//     does not wait for a batch in flight: locks that come due meanwhile (a hand-off's
//     confirmation) go in a batch of their own; a lock is never in two batches at once, nor
//     in one while a Refresh of it is on its way. A renewal is given up after a third of its
//     lease; renewals of much shorter leases (a handed-off WithTTL lock being confirmed) go
//     in a call of their own, so they do not cut the others short. A renewal given up while
//     still on its way (go-redis without ContextTimeoutEnabled lets it go on) is waited for,
//     each node's call on its own, and its answer still renews the lock if it comes before the
//     lease ends on the holder's clock; one that comes later frees the lock in Redis, which
//     renewed it for nobody. Refresh treats its late answers the same way. Renewal stops the
//     moment the lock is released.
//   - Lost locks are reported: Done closes and the context from WithLock is cancelled with
//     cause ErrLockLost when a renewal finds the lock gone or taken, and also when renewals do
//     not get through before the lease ends on the holder's own clock (measured from when the
//     acquiring request was sent, minus a drift margin), so the holder knows before Redis can
//     give the lock to someone else. A wait whose context ends while Redis does not answer
//     (checked by a bounded probe) reports ErrUnavailable, not a busy lock.
//   - Re-entry: an Acquire of the same key on the same Client with a context from WithLock adds
//     a hold (a field in the lock's Redis hash) instead of deadlocking. A context WithLock made
//     for a hold ends when that hold is released, so Do nested under a long-held lock keeps
//     nothing per call.
//   - Fencing tokens: every new lease of a key gets a token above every earlier one, also after
//     the lock expired, was deleted, Redis lost its data, or a replica that missed the last
//     grants was promoted, as long as the server clock does not step back (tokens follow it).
//   - Completion records: Complete stores a record and releases in one step; an acquisition
//     with SkipCompleted gets the record instead of the lock. Middlewares build idempotent
//     replay and "done" markers on it.
//   - Every script runs safely twice, because go-redis retries commands after network errors:
//     a retry never gives a lock twice. A retried Release answers released also when, before
//     the retry came, the lock went to others who released it in turn (up to 5 later full
//     releases); a retry later than that, or after the lease would have run out, answers lost
//     for a release that happened.
//     On a Cluster whose slot is being migrated, a release or a waiting Acquire runs its
//     script again until the slot has moved (Redis answers TRYAGAIN meanwhile), for up to 5 s.
//     Once it has moved, waiters listen again on the slot's new master (the old node ends
//     their subscriptions), and WithReplicaAck follows the MOVED reply.
//
// # What it does not do
//
// A lease-based lock cannot stop a holder that is paused (GC, swap, SIGSTOP) past its lease
// from writing after another process took over: check the fencing token where you write. On
// Redis with asynchronous replication a failover can lose a freshly taken lock. Nor can it
// hold a lock on a server that evicts keys when full: Client.Check reports such servers
// (ErrUnsafeStore); call it at start-up. See
// docs/dlock.md for the data layout, each script, the guarantees and their limits, and the
// go-redis settings that matter.
package dlock
