package main

import (
	"bytes"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/bench/internal/metrics"
)

// report collects the results of a run and renders docs/performance.md.
type report struct {
	plan    plan
	started time.Time
	elapsed time.Duration
	machine machine
	ping    *metrics.Sample

	settings    map[string]string
	uncontended []*uncontendedResult
	contended   []*contendedResult
	manyKeys    []*manyKeysResult
	renewal     []*renewalResult
	gin         *ginResult
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func (r *report) pingP50() time.Duration { return r.ping.Quantile(0.5) }

// contendedFloor is the contended throughput floor: one acquisition per hold plus 1.5 PING.
func (r *report) contendedFloor(hold time.Duration) float64 {
	return 1 / (hold.Seconds() + 1.5*r.pingP50().Seconds())
}

func (r *report) findContended(name string, g int, hold time.Duration) *contendedResult {
	for _, c := range r.contended {
		if c.name == name && c.goroutines == g && c.hold == hold {
			return c
		}
	}
	return nil
}

func (r *report) findUnc(name string) *uncontendedResult {
	for _, u := range r.uncontended {
		if u.name == name {
			return u
		}
	}
	return nil
}

func (r *report) markdown() []byte {
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := r.machine
	mode := "full run"
	if r.plan.quick {
		mode = "**quick run (-quick): short durations, noisier numbers**"
	}
	w("# Performance\n\n")
	w("lockguard's `dlock` measured side by side with [bsm/redislock](https://github.com/bsm/redislock), ")
	w("[go-redsync/redsync](https://github.com/go-redsync/redsync) and a naive hand-written `SET NX PX` loop, ")
	w("all against the same throwaway `redis-server` in one run. This file and the plots in `docs/img/` are ")
	w("written by the benchmark itself; do not edit them by hand.\n\n")
	w("Reproduce with one command: `make bench` (which runs `cd bench && go run ./cmd/bench -out ../docs`; ")
	w("add `-quick` for a short development run). It needs `redis-server` on the PATH.\n\n")

	w("## Machine and run\n\n")
	w("| | |\n|---|---|\n")
	w("| CPU | %s, %d cores |\n", m.cpu, m.cores)
	w("| Go | %s |\n| Redis | %s, on 127.0.0.1, no persistence |\n", m.goVersion, m.redisVersion)
	w("| Date | %s |\n", m.date.Format("2006-01-02 15:04 MST"))
	w("| PING round trip | p50 %s, p99 %s (%d PINGs spread over the run, one connection) |\n",
		fmtDur(r.ping.Quantile(0.5)), fmtDur(r.ping.Quantile(0.99)), r.ping.Len())
	w("| Load average (1, 5, 15 min) | %s at start, %s at end |\n", m.loadStart, m.loadEnd)
	w("| Run | %s, %s |\n\n", mode, r.elapsed.Round(time.Second))
	if loadHigh(m.loadStart) || loadHigh(m.loadEnd) {
		w("The machine was shared with other work during this run (load average above its %d cores at some point); ", m.cores)
		w("all contenders ran interleaved, so the load hit them alike, but absolute numbers are lower and noisier than on an idle machine.\n\n")
	}

	w("## Targets\n\n")
	w("The performance goals lockguard sets itself, judged on this run's numbers.\n\n")
	w("| target | goal | measured | result |\n|---|---|---|---|\n")
	for _, t := range r.targets() {
		w("| %s | %s | %s | %s |\n", t.what, t.goal, t.measured, passFail(t))
	}
	w("\n")

	w("## Contenders\n\n")
	w("Each library is used the way its README or examples show, with their recommended retry settings. ")
	w("Every contender gets its own go-redis v9 client (pool of %d connections, `ContextTimeoutEnabled`) per scenario. ", poolSize)
	w("redsync is held at v4.15.0: `go mod tidy` with later releases needs a test dependency of theirs that the module proxy does not serve. ")
	w("No scenario needs a non-blocking acquire, so every contender is measured through its blocking call.\n\n")
	w("| contender | version | settings |\n|---|---|---|\n")
	for _, name := range contenders.Names {
		w("| %s | %s | %s |\n", name, moduleVersion(name), r.settings[name])
	}
	w("\n")

	r.writeUncontended(w)
	r.writeContended(w)
	r.writeManyKeys(w)
	r.writeRenewal(w)
	r.writeGin(w)
	r.writeLosses(w)
	r.writeMethod(w)
	return b.Bytes()
}

func loadHigh(s string) bool {
	var one float64
	if _, err := fmt.Sscan(strings.Fields(s + " x")[0], &one); err != nil {
		return false
	}
	return one > 1.0
}

func (r *report) writeUncontended(w func(string, ...any)) {
	floor := r.findUnc(floorName)
	w("## 1. Uncontended Acquire + Release\n\n")
	w("One goroutine takes and frees a free key, %d rounds of %d operations per contender in rotating order. ", r.plan.uncRounds, r.plan.uncOps)
	w("Round trips and requests are counted by a go-redis hook on the contender's client; the commandstats column ")
	w("sums the server's `INFO commandstats` deltas of the commands the contender sends itself (a cross-check); ")
	w("calls inside scripts cost server time but no round trip; server time is the commandstats `usec` of the top-level commands ")
	w("(a script's includes its inner calls).\n\n")
	w("| contender | p50 | p99 | p50 / floor | round trips/op | requests/op | commandstats top-level/op | calls inside scripts/op | server time/op |\n")
	w("|---|---|---|---|---|---|---|---|---|\n")
	for _, u := range r.uncontended {
		ratio := float64(u.lat.Quantile(0.5)) / float64(floor.lat.Quantile(0.5))
		w("| %s | %s | %s | %.2fx | %.2f | %.2f | %.2f | %.1f | %.1f µs |\n", u.name, fmtDur(u.lat.Quantile(0.5)), fmtDur(u.lat.Quantile(0.99)),
			ratio, u.perOp(u.counts.RoundTrips), u.perOp(u.counts.Requests), u.perOp(u.topLevel), u.perOp(u.otherCalls), u.perOp(u.serverUsec))
	}
	w("\n")
}

func (r *report) writeContended(w func(string, ...any)) {
	w("## 2. Contended: one key, G goroutines\n\n")
	w("G goroutines loop on one key: Acquire, busy-spin for the hold time, Release, for %s per run ", fmtDur(r.plan.contendedDur))
	w("(the extra points of the throughput curve: %s). The floor is `1 / (hold + 1.5 x PING p50)`: ", fmtDur(r.plan.curveDur))
	w("a perfect lock hands over in half a round trip (the release reaching Redis) plus one (the next holder hearing of it).\n\n")
	w("- **hand-off gap p50**: from the start of a Release to the return of the next Acquire *by a different goroutine*;\n")
	w("- **wait p99 / max wait**: Acquire call to return; max wait also counts waits still unfinished when the run ended;\n")
	w("- **re-acquired by releaser**: share of acquisitions made by the goroutine that had released last (starvation indicator; fair is about 1/G);\n")
	w("- **busiest / fair**: acquisitions of the busiest goroutine divided by total/G;\n")
	w("- **round trips/acq, server time/acq**: everything the contender's client sent during the run (including failed polls and queue entries) per successful acquisition, and the Redis CPU time of it (commandstats `usec`).\n\n")
	for _, hold := range r.plan.holds {
		w("### Hold %s\n\n", fmtDur(hold))
		w("| G | contender | acquisitions/s | x floor | hand-off gap p50 | wait p99 | max wait | re-acquired by releaser | busiest / fair | round trips/acq | server time/acq | errors |\n")
		w("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, g := range r.plan.goroutines {
			for _, name := range contenders.Names {
				c := r.findContended(name, g, hold)
				if c == nil {
					continue
				}
				rtAcq := 0.0
				if c.acquisitions > 0 {
					rtAcq = float64(c.counts.RoundTrips) / float64(c.acquisitions)
				}
				errs := fmt.Sprint(c.errs)
				if c.violations > 0 {
					errs += fmt.Sprintf(", **%d overlaps**", c.violations)
				}
				gap := "–"
				if c.gaps.Len() > 0 {
					gap = fmtDur(c.gaps.Quantile(0.5))
				}
				w("| %d | %s | %.0f | %.2fx | %s | %s | %s | %s | %.2fx | %.1f | %.0f µs | %s |\n", g, name, c.rate(), c.rate()/r.contendedFloor(hold),
					gap, fmtDur(c.waits.Quantile(0.99)), fmtDur(c.maxWait()), pct(c.reacquiredShare()),
					c.maxFairShare(), rtAcq, float64(c.serverUsec)/float64(max(c.acquisitions, 1)), errs)
			}
		}
		w("\nFloor at this hold: %.0f acquisitions/s.\n\n", r.contendedFloor(hold))
	}
	w("![Wait-time distribution, 8 goroutines, 100 µs hold](img/wait_cdf.png)\n\n")
	w("The wait plot shows completed acquisitions only: a goroutine that never got the lock before the run ended has no point on it, ")
	w("but its unfinished wait counts in the max wait of the legend and the tables.\n\n")
	w("![Throughput against goroutines, 100 µs hold](img/throughput.png)\n\n")
}

func (r *report) writeManyKeys(w func(string, ...any)) {
	w("## 3. Many keys\n\n")
	w("%d goroutines each Acquire + Release a uniformly random key out of %d, for %s.\n\n", r.plan.manyWorkers, r.plan.manyKeys, fmtDur(r.plan.manyKeysDur))
	w("| contender | operations/s | p50 | p99 | round trips/op | server time/op | errors |\n|---|---|---|---|---|---|---|\n")
	for _, m := range r.manyKeys {
		w("| %s | %.0f | %s | %s | %.2f | %.0f µs | %d |\n", m.name, m.rate(), fmtDur(m.lat.Quantile(0.5)), fmtDur(m.lat.Quantile(0.99)),
			float64(m.counts.RoundTrips)/float64(max(m.ops, 1)), float64(m.serverUsec)/float64(max(m.ops, 1)), m.errs)
	}
	w("\n")
}

func (r *report) writeRenewal(w func(string, ...any)) {
	w("## 4. Renewal of held locks\n\n")
	if len(r.renewal) == 0 {
		return
	}
	rn := r.renewal[0]
	w("%d locks are acquired with a %s lease and held for %d lease periods (%s); what the client sends meanwhile is ", rn.locks, fmtDur(rn.lease), r.plan.renewPeriods, fmtDur(rn.window))
	w("counted per renewal period (lease/3 = %s). lockguard renews through its watchdog; the others run one refresh loop per lock ", fmtDur(rn.lease/3))
	w("that calls `Refresh` / `Extend` (naive: GET, compare, PEXPIRE) every lease/3. ")
	w("One refresh per lock per period is %d requests and %d round trips.\n\n", rn.locks, rn.locks)
	w("| contender | requests/period | round trips/period | commandstats top-level/period | vs one refresh per lock | locks lost | errors |\n")
	w("|---|---|---|---|---|---|---|\n")
	for _, x := range r.renewal {
		w("| %s | %.1f | %.1f | %.1f | %.2f%% | %d | %d |\n", x.name, x.requestsPerPeriod(), x.roundTripsPerPeriod(),
			float64(x.topLevel)/x.periods(), 100*x.requestsPerPeriod()/float64(x.locks), x.lost, x.errs)
	}
	w("\n")
}

func (r *report) writeMethod(w func(string, ...any)) {
	w("## Method\n\n")
	w("- One `redis-server` (started by `internal/redistest`, no persistence, loopback) serves every scenario; the benchmark stops it at the end.\n")
	w("- Within each scenario the contenders run one after another in an order that rotates from round to round or configuration to configuration, so background load hits all of them alike. Each contender gets a fresh Redis client and its own keys per run, and is warmed up (connections dialled, scripts loaded) before timing.\n")
	w("- Latencies are wall-clock times around the library calls, in the same process; percentiles are exact nearest-rank values over all samples.\n")
	w("- Round trips are counted by a go-redis hook (`ProcessHook` calls plus `ProcessPipelineHook` calls); requests count each command of a pipeline. ")
	w("Pub/sub messages to lockguard's waiters arrive on their subscription connection and are not round trips. ")
	w("`INFO commandstats` deltas, read by a separate client, cross-check the hook; Redis counts commands run inside scripts there as well, so only the commands a contender sends itself are summed, and script-internal calls are shown apart.\n")
	w("- The contended critical section busy-spins (it keeps a CPU, like real work). On a %d-core machine the client goroutines, the Redis server and the measuring code share the CPUs, which caps every contender alike.\n", r.machine.cores)
	w("- Ratios are to floors measured in the same run: the bare `SET NX PX` + `DEL` pair for uncontended latency, `1 / (hold + 1.5 x PING p50)` for contended throughput.\n")
	w("- Nothing is tuned per contender beyond its README settings listed above; a missed lockguard target is reported, not hidden.\n")
}

// moduleVersion returns the version of the contender's module in this binary.
func moduleVersion(name string) string {
	path := map[string]string{
		contenders.Lockguard: "github.com/lockguard/lockguard",
		contenders.Redislock: "github.com/bsm/redislock",
		contenders.Redsync:   "github.com/go-redsync/redsync/v4",
		contenders.Naive:     "github.com/redis/go-redis/v9",
	}[name]
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, m := range bi.Deps {
		if m.Path != path {
			continue
		}
		switch {
		case m.Replace != nil && (m.Replace.Version == "" || m.Replace.Version == "(devel)"):
			return "this tree"
		case name == contenders.Naive:
			return "go-redis " + m.Version
		default:
			return m.Version
		}
	}
	return "unknown"
}
