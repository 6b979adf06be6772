// Package contenders puts the Redis locks the benchmark compares behind one small interface:
// lockguard (package dlock), bsm/redislock, go-redsync/redsync and a naive hand-written
// SET NX PX loop. Each uses the settings its README or examples recommend; Settings returns
// them in words for the report.
//
//	lk, err := c.Acquire(ctx, "key") // blocks until held or ctx ends
//	...
//	err = lk.Release(ctx)
//
// Every contender is bound to its own go-redis client, so hook counters attribute each request
// to one library. Nothing here retries or tunes beyond what the library itself does.
package contenders
