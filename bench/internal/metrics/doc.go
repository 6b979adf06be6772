// Package metrics holds the measuring tools of the lockguard benchmark: duration samples with
// percentiles, a go-redis hook that counts the requests and round trips a client sends and
// sums the time spent inside those calls, deltas of the server's INFO commandstats to
// cross-check them, and whole-process CPU time: the server's (INFO cpu) and this process's
// (getrusage).
//
//	var rt metrics.RoundTrips
//	rdb.AddHook(&rt)
//	before := rt.Snapshot()
//	// ... work ...
//	d := rt.Snapshot().Sub(before) // d.RoundTrips, d.Requests, d.Inside
//
// The counts are exact for what goes through a client's hooks (commands and pipelines), and a
// call is counted when it returns, so a window counts the calls that completed in it; pub/sub
// traffic on a dedicated subscription connection does not pass through them and is not counted.
// Percentiles are exact (sorted samples, nearest rank), not estimated.
package metrics
