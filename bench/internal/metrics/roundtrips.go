package metrics

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook (install it with AddHook) that counts what its client sends:
// every Process call is one request in one round trip, every pipeline is one round trip
// carrying len(cmds) requests. Commands a Lua script runs inside Redis are not requests.
// A call is counted when it returns, not when it starts: a command still waiting for a pooled
// connection, or still on the wire, when a snapshot is taken is not in that snapshot, so a
// measuring window counts the round trips that completed in it.
// The handshake go-redis sends on each new connection (HELLO, CLIENT SETINFO, CLIENT
// MAINT_NOTIFICATIONS) is left out: it is the pool's cost, not the lock's.
// The hook also sums the time spent inside the calls it counts (connection from the pool,
// write, wait, read, parse): what a caller spends beyond that is its own work.
type RoundTrips struct {
	roundTrips atomic.Int64
	requests   atomic.Int64
	inside     atomic.Int64 // nanoseconds
}

// Counts is a snapshot of a RoundTrips hook, or a difference of two.
type Counts struct {
	RoundTrips int64         // client->server exchanges: single commands plus pipelines
	Requests   int64         // top-level commands, counting each command of a pipeline
	Inside     time.Duration // time spent inside those calls, summed
}

// Sub returns c - o.
func (c Counts) Sub(o Counts) Counts {
	return Counts{RoundTrips: c.RoundTrips - o.RoundTrips, Requests: c.Requests - o.Requests, Inside: c.Inside - o.Inside}
}

// Add returns c + o.
func (c Counts) Add(o Counts) Counts {
	return Counts{RoundTrips: c.RoundTrips + o.RoundTrips, Requests: c.Requests + o.Requests, Inside: c.Inside + o.Inside}
}

// Snapshot returns the counts so far.
func (h *RoundTrips) Snapshot() Counts {
	return Counts{RoundTrips: h.roundTrips.Load(), Requests: h.requests.Load(), Inside: time.Duration(h.inside.Load())}
}

// DialHook implements redis.Hook; dials are not counted.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook: one command, one round trip.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		if !handshake(cmd) {
			h.inside.Add(int64(time.Since(start)))
			h.roundTrips.Add(1)
			h.requests.Add(1)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: one round trip for the whole pipeline (a
// MULTI/EXEC transaction's wrapping commands are not counted as requests).
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		n := 0
		for _, c := range cmds {
			if name := c.Name(); name != "multi" && name != "exec" && !handshake(c) {
				n++
			}
		}
		if n > 0 {
			h.inside.Add(int64(time.Since(start)))
			h.roundTrips.Add(1)
			h.requests.Add(int64(n))
		}
		return err
	}
}

// handshake reports whether cmd belongs to go-redis's connection set-up.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
