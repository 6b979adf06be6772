package main

import (
	"github.com/gin-gonic/gin"
	"github.com/lockguard/lockguard/bench/internal/metrics"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// ginlockRoute returns the ginlock middleware of the locked route, on its own counted client,
// with a description of its settings and a function that stops it.
func ginlockRoute(b *bench) (mw gin.HandlerFunc, rt *metrics.RoundTrips, settings string, stop func()) {
	c := b.newClient()
	dc := dlock.New(c.Client)
	mw = ginlock.New(dc, keyfunc.Join(keyfunc.IdempotencyKey()))
	settings = "dlock defaults, key `keyfunc.Join(keyfunc.IdempotencyKey())`, ginlock defaults: " +
		"replay is on for Idempotency-Key keys, so each request takes the lock and stores its response record as it releases"
	return mw, c.rt, settings, func() {
		_ = dc.Close()
		_ = c.Close()
	}
}
