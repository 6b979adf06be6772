package main

import (
	"github.com/gin-gonic/gin"
	"github.com/lockguard/lockguard/bench/internal/metrics"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// ginlockRoute returns the ginlock middleware of the locked route, and the same without
// replay (lock only), on one counted client of their own, with a description of the settings
// and a function that stops them.
func ginlockRoute(b *bench) (mw, lockOnly gin.HandlerFunc, rt *metrics.RoundTrips, settings string, stop func()) {
	c := b.newClient()
	dc := dlock.New(c.Client)
	key := keyfunc.Join(keyfunc.IdempotencyKey())
	mw, lockOnly = ginlock.New(dc, key), ginlock.New(dc, key, ginlock.WithoutReplay())
	settings = "dlock defaults, key `keyfunc.Join(keyfunc.IdempotencyKey())`, ginlock defaults: " +
		"replay is on for Idempotency-Key keys, so each request takes the lock and stores its response record as it releases; " +
		"the *lock only* route adds `ginlock.WithoutReplay()`: it takes and releases the lock, as a per-account lock does"
	return mw, lockOnly, c.rt, settings, func() {
		_ = dc.Close()
		_ = c.Close()
	}
}
