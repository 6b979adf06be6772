package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/bench/internal/metrics"
)

// Routes of the Gin scenario.
const (
	routeBare     = "bare"
	routeBareBody = "bare, reads its body"
	routeFloor    = "SET NX + DEL (floor)"
	routeLocked   = "ginlock"
	routeLockOnly = "ginlock, lock only"
)

// routeRank orders the routes in the table.
func routeRank(route string) int {
	return map[string]int{routeBare: 0, routeBareBody: 1, routeFloor: 2, routeLocked: 3, routeLockOnly: 4}[route]
}

// routePaths maps each route of the Gin scenario to its path.
var routePaths = map[string]string{routeBare: "/bare", routeBareBody: "/body", routeFloor: "/floor", routeLocked: "/locked", routeLockOnly: "/lockonly"}

// ginResult is the Gin middleware scenario: a trivial route bare and behind ginlock.
type ginResult struct {
	available bool
	reason    string
	settings  string
	lowConns  int
	highConns int
	rounds    int
	rows      []*ginRow
}

// ginRow is one load level on one route, over all rounds.
type ginRow struct {
	route      string
	conns      int
	requests   int64
	errors     int64
	elapsed    time.Duration
	p50, p99   time.Duration   // over the latencies of every round
	roundP99   []time.Duration // p99 of each round, in round order
	roundTrips float64         // Redis round trips per request (ginlock only)

	latency []time.Duration // every round's, until finish
	rts     int64
}

// add takes in one round's load generator result and the Redis round trips made during it.
func (r *ginRow) add(res *loadResult, roundTrips int64) {
	r.requests += res.Requests
	r.errors += res.Errors
	r.elapsed += res.Elapsed
	r.rts += roundTrips
	r.latency = append(r.latency, res.Latency...)
	r.roundP99 = append(r.roundP99, p99Of(res.Latency))
}

// finish computes the percentiles over all rounds.
func (r *ginRow) finish() {
	slices.Sort(r.latency)
	if n := len(r.latency); n > 0 {
		r.p50 = r.latency[(n-1)/2]
		r.p99 = p99Of(r.latency)
	}
	if r.route != routeBare && r.route != routeBareBody && r.requests > 0 {
		r.roundTrips = float64(r.rts) / float64(r.requests)
	}
	r.latency = nil
}

// p99Of is the nearest-rank p99 of sorted latencies (0 for none).
func p99Of(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	return sorted[min(n-1, int(0.99*float64(n)+0.999999)-1)]
}

func (r *ginRow) rate() float64 { return float64(r.requests-r.errors) / r.elapsed.Seconds() }

func (g *ginResult) row(route string, conns int) *ginRow {
	for _, r := range g.rows {
		if r.route == route && r.conns == conns {
			return r
		}
	}
	return nil
}

// addedP99 is the p99 latency ginlock adds to the route at low load, over all rounds.
func (g *ginResult) addedP99() time.Duration {
	b, l := g.row(routeBare, g.lowConns), g.row(routeLocked, g.lowConns)
	if b == nil || l == nil {
		return 0
	}
	return l.p99 - b.p99
}

// roundAddedP99 is the spread, in microseconds, of the p99 ginlock adds at low load in each
// round (its p99 in the round minus the bare route's in the same round).
func (g *ginResult) roundAddedP99() spread {
	b, l := g.row(routeBare, g.lowConns), g.row(routeLocked, g.lowConns)
	if b == nil || l == nil {
		return spread{}
	}
	var xs []float64
	for i := range min(len(b.roundP99), len(l.roundP99)) {
		xs = append(xs, float64(l.roundP99[i]-b.roundP99[i])/float64(time.Microsecond))
	}
	return spreadOf(xs)
}

// highRatio is ginlock's requests/s over the bare route's under load.
func (g *ginResult) highRatio() float64 {
	b, l := g.row(routeBare, g.highConns), g.row(routeLocked, g.highConns)
	if b == nil || l == nil || b.rate() == 0 {
		return 0
	}
	return l.rate() / b.rate()
}

func (g *ginResult) highNote() string {
	b, l := g.row(routeBare, g.highConns), g.row(routeLocked, g.highConns)
	if b == nil || l == nil {
		return ""
	}
	return fmt.Sprintf("%.0f against %.0f requests/s with %d connections", l.rate(), b.rate(), g.highConns)
}

// gin serves the same trivial handler on loopback bare, after reading the request body, behind
// the floor lock, and behind ginlock keyed by the Idempotency-Key header (with and without
// replay), and drives each route at low load (one
// connection) and high load with the load generator in a child process, in rounds that run
// the routes in rotating order, so that machine noise hits them alike.
func (b *bench) gin(ctx context.Context, rep *report) error {
	g := &ginResult{lowConns: b.plan.ginLowConns, highConns: b.plan.ginHighConns}
	rep.gin = g
	g.available = true
	mw, lockOnly, rt, settings, stop := ginlockRoute(b)
	defer stop()
	g.settings = settings
	fc := b.newClient()
	defer func() { _ = fc.Close() }()
	counted := map[string]*metrics.RoundTrips{routeFloor: fc.rt, routeLocked: rt, routeLockOnly: rt}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.POST("/bare", ok)
	r.POST("/body", readBody, ok)
	r.POST("/floor", floorLock(fc.Client), ok)
	r.POST("/locked", mw, ok)
	r.POST("/lockonly", lockOnly, ok)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	base := "http://" + ln.Addr().String()

	// Warm up every route (scripts, and the Redis pool with as many connections as the high
	// load uses), then measure in rotating order.
	routes := []string{routeBare, routeBareBody, routeFloor, routeLocked, routeLockOnly}
	for _, route := range routes {
		if _, err := runLoadgen(ctx, base+routePaths[route], g.highConns, 300*time.Millisecond, 4000); err != nil {
			return err
		}
	}
	rounds := b.plan.ginRounds
	g.rounds = rounds
	dur, maxReqs := b.plan.ginDur/time.Duration(rounds), max(b.plan.ginMaxReqs/rounds, 1)
	for _, conns := range []int{g.lowConns, g.highConns} {
		for _, route := range routes {
			g.rows = append(g.rows, &ginRow{route: route, conns: conns})
		}
	}
	for round := range rounds {
		for level, conns := range []int{g.lowConns, g.highConns} {
			for _, route := range rotate(routes, round+level) {
				var c0 metrics.Counts
				if rt := counted[route]; rt != nil {
					c0 = rt.Snapshot()
				}
				res, err := runLoadgen(ctx, base+routePaths[route], conns, dur, maxReqs)
				if err != nil {
					return err
				}
				if res.Errors > 0 {
					log.Printf("  %s: statuses %v", route, res.Statuses)
				}
				log.Printf("  round %d %-18s conns=%-2d %7.0f req/s p99 %v errors %d", round+1, route, conns,
					float64(res.Requests-res.Errors)/res.Elapsed.Seconds(), p99Of(res.Latency), res.Errors)
				var trips int64
				if rt := counted[route]; rt != nil {
					trips = rt.Snapshot().Sub(c0).RoundTrips
				}
				g.row(route, conns).add(res, trips)
			}
		}
	}
	for _, row := range g.rows {
		row.finish()
	}
	if g.row(routeLocked, g.lowConns) == nil {
		return errors.New("no low-load result")
	}
	return nil
}

func (r *report) writeGin(w func(string, ...any)) {
	w("## 5. Gin middleware\n\n")
	g := r.gin
	if g == nil || !g.available {
		w("Not measured in this run: %s.\n\n", r.ginReason())
		return
	}
	w("A trivial Gin route (`200 ok`) served on loopback, bare and behind `ginlock.New` (%s). ", g.settings)
	w("The load comes from a separate process (this benchmark binary re-executed as a closed-loop Go HTTP client): ")
	w("each connection POSTs with a unique `Idempotency-Key`, waits for the answer, and sends the next, for %s or at most %d requests per route and load, "+
		"in %d rounds of %s that run the routes in rotating order (so machine noise hits them alike); percentiles are over all rounds. ",
		fmtDur(r.plan.ginDur), r.plan.ginMaxReqs, g.rounds, fmtDur(r.plan.ginDur/time.Duration(max(g.rounds, 1))))
	w("Low load is %d connection, high load %d; every route is first warmed up with %d connections, so the middleware's Redis pool has dialled its connections before anything is timed.\n\n", g.lowConns, g.highConns, g.highConns)
	w("| route | connections | requests/s | p50 | p99 | Redis round trips/request | errors |\n|---|---|---|---|---|---|---|\n")
	rows := slices.Clone(g.rows) // measured in rotating order; shown by load, then route
	slices.SortStableFunc(rows, func(a, b *ginRow) int {
		return cmp.Or(cmp.Compare(a.conns, b.conns), cmp.Compare(routeRank(a.route), routeRank(b.route)))
	})
	for _, row := range rows {
		rt := "-"
		if row.route != routeBare && row.route != routeBareBody {
			rt = fmt.Sprintf("%.2f", row.roundTrips)
		}
		w("| %s | %d | %.0f | %s | %s | %s | %d |\n", row.route, row.conns, row.rate(), fmtDur(row.p50), fmtDur(row.p99), rt, row.errors)
	}
	w("\nAdded p99 latency at low load: %s, that is %.1f PING round trips (interleaved PING p50 %s, section 1).",
		fmtDur(g.addedP99()), r.rtts(g.addedP99()), fmtDur(r.rtt()))
	if sp := g.roundAddedP99(); sp.n > 1 {
		w(" Per round (ginlock's p99 minus the bare route's in the same round): %s µs.", sp.countRange(0))
	}
	if b, lo := g.row(routeBare, g.lowConns), g.row(routeLockOnly, g.lowConns); b != nil && lo != nil {
		w(" Lock only, without replay: %s at p50 and %s at p99.", fmtDur(lo.p50-b.p50), fmtDur(lo.p99-b.p99))
	}
	if b, f, l := g.row(routeBare, g.lowConns), g.row(routeFloor, g.lowConns), g.row(routeLocked, g.lowConns); b != nil && f != nil && l != nil {
		w(" The *floor* route (`SET NX PX` of the key before the same handler, 409 if taken, `DEL` after it: two bare commands on the request's context, "+
			"the least any Redis lock in a handler costs) adds %s at p50 and %s at p99; ginlock adds %s at p50 and %s at p99 beyond it.",
			fmtDur(f.p50-b.p50), fmtDur(f.p99-b.p99), fmtDur(l.p50-f.p50), fmtDur(l.p99-f.p99))
	}
	w(" With replay the middleware reads the request body for its fingerprint, and net/http then starts its " +
		"background read of the connection, as it does for any handler that reads its body; the bare route never reads it.")
	if b, rb := g.row(routeBare, g.lowConns), g.row(routeBareBody, g.lowConns); b != nil && rb != nil {
		w(" The bare route with a middleware that reads the request body to its end first (no Redis) differs from the bare one by %s at p50 and %s at p99",
			signedDur(rb.p50-b.p50), signedDur(rb.p99-b.p99))
		if l := g.row(routeLocked, g.lowConns); l != nil && (rb.p50-b.p50).Abs()*10 < l.p50-b.p50 {
			w(": under a tenth of what ginlock adds at p50, so reading the body is not where its time goes")
		}
		w(".")
	}
	w("\n\n")
}

// signedDur is d with its sign always written: +12 µs, -3 µs.
func signedDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// readBody reads the request body to its end before the handler, as a handler that binds its
// JSON does, and no more: what reading a body costs in net/http, without Redis.
func readBody(c *gin.Context) {
	if _, err := io.Copy(io.Discard, c.Request.Body); err != nil {
		c.AbortWithStatus(http.StatusBadRequest)
	}
}

// floorLock is the least any Redis lock middleware does, for reference: SET NX PX of a key
// from the Idempotency-Key header before the handler (409 when it is taken) and DEL after
// it, two commands on the request's context; no owner check, no renewal, no replay.
func floorLock(rdb *redis.Client) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, key := c.Request.Context(), "bench:ginfloor:"+c.GetHeader("Idempotency-Key")
		ok, err := rdb.SetNX(ctx, key, "1", 10*time.Second).Result()
		switch {
		case err != nil:
			c.AbortWithStatus(http.StatusServiceUnavailable)
			return
		case !ok:
			c.AbortWithStatus(http.StatusConflict)
			return
		}
		c.Next()
		_ = rdb.Del(ctx, key).Err()
	}
}
