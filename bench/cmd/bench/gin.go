package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"
)

// Routes of the Gin scenario.
const (
	routeBare     = "bare"
	routeLocked   = "ginlock"
	routeLockOnly = "ginlock, lock only"
)

// routeRank orders the routes in the table.
func routeRank(route string) int {
	return map[string]int{routeBare: 0, routeLocked: 1, routeLockOnly: 2}[route]
}

// routePaths maps each route of the Gin scenario to its path.
var routePaths = map[string]string{routeBare: "/bare", routeLocked: "/locked", routeLockOnly: "/lockonly"}

// ginResult is the Gin middleware scenario: a trivial route bare and behind ginlock.
type ginResult struct {
	available bool
	reason    string
	settings  string
	lowConns  int
	highConns int
	rows      []*ginRow
}

// ginRow is one load level on one route.
type ginRow struct {
	route      string
	conns      int
	requests   int64
	errors     int64
	elapsed    time.Duration
	p50, p99   time.Duration
	roundTrips float64 // Redis round trips per request (ginlock only)
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

// addedP99 is the p99 latency ginlock adds to the route at low load.
func (g *ginResult) addedP99() time.Duration {
	b, l := g.row(routeBare, g.lowConns), g.row(routeLocked, g.lowConns)
	if b == nil || l == nil {
		return 0
	}
	return l.p99 - b.p99
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

// gin serves POST /bare and POST /locked (the same trivial handler, the second behind ginlock
// keyed by the Idempotency-Key header) on loopback, and drives each route at low load (one
// connection) and high load with the load generator in a child process.
func (b *bench) gin(ctx context.Context, rep *report) error {
	g := &ginResult{lowConns: b.plan.ginLowConns, highConns: b.plan.ginHighConns}
	rep.gin = g
	g.available = true
	mw, lockOnly, rt, settings, stop := ginlockRoute(b)
	defer stop()
	g.settings = settings

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.POST("/bare", ok)
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
	routes := []string{routeBare, routeLocked, routeLockOnly}
	for _, route := range routes {
		if _, err := runLoadgen(ctx, base+routePaths[route], g.highConns, 300*time.Millisecond, 4000); err != nil {
			return err
		}
	}
	for level, conns := range []int{g.lowConns, g.highConns} {
		for _, route := range rotate(routes, level) {
			c0 := rt.Snapshot()
			res, err := runLoadgen(ctx, base+routePaths[route], conns, b.plan.ginDur, b.plan.ginMaxReqs)
			if err != nil {
				return err
			}
			row := &ginRow{route: route, conns: conns, requests: res.Requests, errors: res.Errors, elapsed: res.Elapsed}
			if n := len(res.Latency); n > 0 {
				row.p50 = res.Latency[(n-1)/2]
				row.p99 = res.Latency[min(n-1, int(0.99*float64(n)+0.999999)-1)]
			}
			if route != routeBare && res.Requests > 0 {
				row.roundTrips = float64(rt.Snapshot().Sub(c0).RoundTrips) / float64(res.Requests)
			}
			if res.Errors > 0 {
				log.Printf("  %s: statuses %v", route, res.Statuses)
			}
			log.Printf("  %-18s conns=%-2d %7.0f req/s p50 %v p99 %v errors %d", route, conns, row.rate(), row.p50, row.p99, row.errors)
			g.rows = append(g.rows, row)
		}
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
	w("each connection POSTs with a unique `Idempotency-Key`, waits for the answer, and sends the next, for %s or at most %d requests. ", fmtDur(r.plan.ginDur), r.plan.ginMaxReqs)
	w("Low load is %d connection, high load %d; every route is first warmed up with %d connections, so the middleware's Redis pool has dialled its connections before anything is timed.\n\n", g.lowConns, g.highConns, g.highConns)
	w("| route | connections | requests/s | p50 | p99 | Redis round trips/request | errors |\n|---|---|---|---|---|---|---|\n")
	rows := slices.Clone(g.rows) // measured in rotating order; shown by load, then route
	slices.SortStableFunc(rows, func(a, b *ginRow) int {
		return cmp.Or(cmp.Compare(a.conns, b.conns), cmp.Compare(routeRank(a.route), routeRank(b.route)))
	})
	for _, row := range rows {
		rt := "-"
		if row.route != routeBare {
			rt = fmt.Sprintf("%.2f", row.roundTrips)
		}
		w("| %s | %d | %.0f | %s | %s | %s | %d |\n", row.route, row.conns, row.rate(), fmtDur(row.p50), fmtDur(row.p99), rt, row.errors)
	}
	w("\nAdded p99 latency at low load: %s, that is %.1f PING round trips (interleaved PING p50 %s, section 1).",
		fmtDur(g.addedP99()), r.rtts(g.addedP99()), fmtDur(r.rtt()))
	if b, lo := g.row(routeBare, g.lowConns), g.row(routeLockOnly, g.lowConns); b != nil && lo != nil {
		w(" Lock only, without replay: %s at p50 and %s at p99.", fmtDur(lo.p50-b.p50), fmtDur(lo.p99-b.p99))
	}
	w(" With replay the middleware reads the request body for its fingerprint, and net/http then starts its " +
		"background read of the connection, as it does for any handler that reads its body; the bare route never reads it.")
	w("\n\n")
}
