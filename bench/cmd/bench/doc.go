// Command bench measures lockguard's dlock against bsm/redislock, go-redsync/redsync and a
// naive SET NX PX loop on one throwaway redis-server, and writes docs/performance.md with
// tables and PNG plots (docs/img).
//
//	cd bench && go run ./cmd/bench            # full run, a few minutes
//	cd bench && go run ./cmd/bench -quick     # short run for development
//	cd bench && go run ./cmd/bench -only gin  # some scenarios, logged, nothing written
//
// Scenarios: uncontended Acquire+Release latency, round trips, Redis server time, client
// time (outside the Redis calls) and whole-process CPU time of Redis and of this process per
// operation; one key
// contended by 1 to 32 goroutines (throughput, hand-off gap, waits, fairness); 64 goroutines
// over 10,000 keys; renewal cost of 10,000 held locks; and the Gin middleware under an HTTP
// load generator that runs in a child process (this binary, re-executed with the loadgen
// argument). Contenders run in rotating order within each scenario, so machine noise hits all
// of them alike; the uncontended, contended (the configurations of its tables), many-keys and
// renewal scenarios run several rounds and report the median with the range.
//
// The report states the machine, its load, the Redis version and the run's round trip (a PING
// reference measured in the rotation of the uncontended rounds, in the same rhythm as the lock
// operations), and judges lockguard's performance targets from the measured numbers only. The
// redis-server is stopped when the run ends, and killed with the process if it dies.
package main
