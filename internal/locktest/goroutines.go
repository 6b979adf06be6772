package locktest

import "runtime/metrics"

// GoroutinesStarted runs fn once to warm up (scripts loaded, connections open, background
// loops started), then n more times, and returns how many goroutines the process started
// during those n runs.
func GoroutinesStarted(n int, fn func()) uint64 {
	fn()
	before := goroutinesCreated()
	for range n {
		fn()
	}
	return goroutinesCreated() - before
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
