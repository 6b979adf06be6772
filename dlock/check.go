package dlock

import (
	"context"
	"errors"
)

// ErrUnsafeStore is matched by the error of Check when the store is set up so that a lock, a
// line of waiters or a completion record can vanish before its time: then two holders can run
// at once, and work recorded as done can run again.
var ErrUnsafeStore = errors.New("dlock: unsafe store configuration")

// Check reads the settings of every server behind the Client and reports those that break
// the guarantees of docs/reliability.md: on a Cluster, every node of the cluster's slot map,
// masters and replicas (a replica is promoted with its own settings); behind Sentinel, the
// current master. Call it once at start-up; it changes nothing.
//
// With Redis, the setting that matters is memory eviction: a server with a maxmemory limit and
// any maxmemory-policy but noeviction deletes keys when it is full, and every lock key has an
// expiry, so even the volatile-* policies may pick a held lock. Under noeviction a full server
// refuses the writes instead: new locks fail with ErrUnavailable (locking stops), while work
// already running finishes: releases, Complete's records and hand-offs to waiters in line go
// through, and a held lock stays busy (ErrNotObtained) for a wait that cannot join the line.
//
// Errors: one matching ErrUnsafeStore that names each unsafe server and its settings;
// ErrUnavailable wrapping the store's error when a server could not be asked (unreachable, or
// refusing INFO to the Client's user: the check reads INFO memory); ErrClosed.
func (c *Client) Check(ctx context.Context) error {
	mustContext(ctx, "Check")
	if c.closed.Load() {
		return ErrClosed
	}
	return c.be.check(ctx)
}
