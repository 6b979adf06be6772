package main

import (
	"bytes"
	"fmt"
	"runtime/debug"
	"slices"
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
	// idlePing is the PINGs sent back to back between scenarios; for comparison only, the
	// run's round trip is the interleaved PING reference of the uncontended scenario (rtt).
	idlePing *metrics.Sample

	settings    map[string]string
	uncontended []*uncontendedResult
	contended   []*contendedResult
	manyKeys    []*manyKeysResult
	renewal     []*renewalRuns
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

// usOf formats d in microseconds with one decimal.
func usOf(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// rtt is the run's Redis round trip: the p50 of the PING reference interleaved with the
// uncontended rounds, or, when that scenario did not run, of the PINGs between scenarios.
func (r *report) rtt() time.Duration {
	if p := r.findUnc(pingName); p != nil && p.lat.Len() > 0 {
		return p.lat.Quantile(0.5)
	}
	if r.idlePing != nil {
		return r.idlePing.Quantile(0.5)
	}
	return 0
}

// rtts expresses d in round trips of rtt.
func (r *report) rtts(d time.Duration) float64 {
	if r.rtt() == 0 {
		return 0
	}
	return float64(d) / float64(r.rtt())
}

// contendedFloor is the contended throughput floor: one acquisition per hold plus 1.5 PING
// (interleaved PING p50).
func (r *report) contendedFloor(hold time.Duration) float64 {
	return 1 / (hold.Seconds() + 1.5*r.rtt().Seconds())
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
	if p := r.findUnc(pingName); p != nil {
		w("| Redis round trip (PING, interleaved) | p50 %s, p99 %s: %d PINGs, one per operation on a bench client, in the rotation of the uncontended rounds (section 1); every \"PING round trips\" figure and the contended floor use this p50 |\n",
			fmtDur(p.lat.Quantile(0.5)), fmtDur(p.lat.Quantile(0.99)), p.lat.Len())
	}
	if r.idlePing != nil && r.idlePing.Len() > 0 {
		w("| PING between scenarios, idle process | p50 %s, p99 %s: %d PINGs sent back to back on one connection at the scenario boundaries, nothing else running; for comparison only |\n",
			fmtDur(r.idlePing.Quantile(0.5)), fmtDur(r.idlePing.Quantile(0.99)), r.idlePing.Len())
	}
	w("| Load average (1, 5, 15 min) | %s at start, %s at end |\n", m.loadStart, m.loadEnd)
	w("| Run | %s, %s |\n\n", mode, r.elapsed.Round(time.Second))
	if p := r.findUnc(pingName); p != nil && r.idlePing != nil && r.idlePing.Len() > 0 {
		inter, idle := p.lat.Quantile(0.5), r.idlePing.Quantile(0.5)
		if f := float64(inter) / float64(idle); f > 1.2 || f < 1/1.2 {
			w("The two PING figures differ (p50 %s interleaved with lock operations, %s back to back between scenarios, %.1fx): ", fmtDur(inter), fmtDur(idle), f)
			w("a round trip on this machine depends on what its CPUs were doing just before, so the report measures it in the same rhythm as the lock operations and uses that one.\n\n")
		} else {
			w("The two PING figures agree within 20%% (p50 %s interleaved, %s between scenarios).\n\n", fmtDur(inter), fmtDur(idle))
		}
	}
	if loadHigh(m.loadStart, m.cores) || loadHigh(m.loadEnd, m.cores) {
		w("The machine was shared with other work during this run (1-minute load average above its %d cores at some point); ", m.cores)
		w("the contenders ran in rotating order, so the load hit them alike over each scenario (in the contended one, over its rounds and configurations), but absolute numbers are lower and noisier than on an idle machine.\n\n")
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

// loadHigh reports whether the 1-minute load average in s exceeds the number of cores.
func loadHigh(s string, cores int) bool {
	var one float64
	if _, err := fmt.Sscan(strings.Fields(s + " x")[0], &one); err != nil {
		return false
	}
	return one > float64(cores)
}

func (r *report) writeUncontended(w func(string, ...any)) {
	floor := r.findUnc(floorName)
	w("## 1. Uncontended Acquire + Release\n\n")
	w("One goroutine takes and frees a free key, %d rounds of %d operations per contender in rotating order. ", r.plan.uncRounds, r.plan.uncOps)
	w("Four references run in the same rotation on clients like the contenders': the bare `SET NX PX` + `DEL` pair (the floor), ")
	w("two calls of a script that does nothing, two scripts that make one read and one write each (the least a lock that keeps a fencing token across holders can do with one script per step: ")
	w("acquire reads the key and writes holder, next token and lease; release reads it and writes it free, keeping the token), ")
	w("and one PING per operation, whose p50 is the run's round trip")
	if p := r.findUnc(pingName); p != nil && floor != nil {
		w(" (2 x PING p50 is %s, against %s for the floor pair)", fmtDur(2*p.lat.Quantile(0.5)), fmtDur(floor.lat.Quantile(0.5)))
	}
	w(". **p50 / floor** divides p50s taken over all rounds; **per round** divides each contender's p50 in a round by the floor's p50 in the same round, ")
	w("and shows the median of those %d ratios with their range (the spread is the noise: within a round each contender runs its %d operations as one block, one block after another, so its block and the floor's can be several blocks apart, and the same place in the rotation does not come round equally often for every pair in %d rounds); the ≤ 1.2x target is judged on that median. ", r.plan.uncRounds, r.plan.uncOps, r.plan.uncRounds)
	w("Round trips and requests are counted by a go-redis hook on the contender's client; the commandstats column ")
	w("sums the server's `INFO commandstats` deltas of the commands the contender sends itself (a cross-check); ")
	w("calls inside scripts cost server time but no round trip; server time is the commandstats `usec` of the top-level commands ")
	w("(a script's includes its inner calls). **Client time** is each operation's time outside the go-redis calls it makes (the same hook times them, ")
	w("from taking a pooled connection to the parsed reply): the library's own work, and go-redis building its commands; its p50 is shown. ")
	w("**Redis CPU** and **bench CPU** are whole-process CPU time (user and system) per operation over each contender's rounds: Redis's from `INFO cpu`, ")
	w("which counts what commandstats leaves out (reading requests, writing replies, the event loop), and this benchmark process's from getrusage, ")
	w("which counts the library, go-redis and the Go runtime (scheduler, network poller, garbage collector) on all threads.\n\n")
	w("| contender | p50 | p99 | p50 / floor | per round: p50 / floor, median (range) | round trips/op | requests/op | commandstats top-level/op | calls inside scripts/op | server time/op | client time/op, p50 | Redis CPU/op | bench CPU/op |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, u := range r.uncontended {
		ratio := float64(u.lat.Quantile(0.5)) / float64(floor.lat.Quantile(0.5))
		w("| %s | %s | %s | %.2fx | %s | %.2f | %.2f | %.2f | %.1f | %.1f µs | %s | %.1f µs | %.1f µs |\n", u.name, fmtDur(u.lat.Quantile(0.5)), fmtDur(u.lat.Quantile(0.99)),
			ratio, u.ratioSpread(floor).ratio(), u.perOp(u.counts.RoundTrips), u.perOp(u.counts.Requests), u.perOp(u.topLevel), u.perOp(u.otherCalls), u.perOp(u.serverUsec),
			usOf(u.client.Quantile(0.5)), u.cpuPerOp(u.serverCPU), u.cpuPerOp(u.processCPU))
	}
	w("\n")
}

// minGaps is the number of hand-offs a run needs for its gap p50 to stand for the run.
const minGaps = 100

// fastestGap is the smallest hand-off gap p50 of the table's runs that have at least minGaps
// hand-offs, with its run.
func (r *report) fastestGap() (time.Duration, *contendedResult) {
	var best time.Duration
	var at *contendedResult
	for _, c := range r.contended {
		if c.table && c.gaps.Len() >= minGaps && (at == nil || c.gaps.Quantile(0.5) < best) {
			best, at = c.gaps.Quantile(0.5), c
		}
	}
	return best, at
}

// curveOnly lists the goroutine counts of the throughput curve that are not in the tables.
func (r *report) curveOnly() []string {
	var out []string
	for _, g := range r.plan.curve {
		if !slices.Contains(r.plan.goroutines, g) {
			out = append(out, fmt.Sprint(g))
		}
	}
	return out
}

// tableGs lists the goroutine counts of the contended tables, as "8 and 32".
func (r *report) tableGs() string {
	var gs []string
	for _, g := range r.plan.goroutines {
		gs = append(gs, fmt.Sprint(g))
	}
	if len(gs) < 2 {
		return strings.Join(gs, "")
	}
	return strings.Join(gs[:len(gs)-1], ", ") + " and " + gs[len(gs)-1]
}

func (r *report) writeContended(w func(string, ...any)) {
	w("## 2. Contended: one key, G goroutines\n\n")
	w("G goroutines loop on one key: Acquire, busy-spin for the hold time, Release. ")
	w("Every configuration of the tables (G = %s, at each hold) runs each contender in %d rounds of %s, ", r.tableGs(), r.plan.contendedRounds, fmtDur(r.plan.contendedDur))
	w("a round running every configuration once, so that a configuration's rounds are spread over the scenario; the order of the contenders rotates from configuration to configuration and from round to round, ")
	w("so machine noise hits them alike. The other points of the throughput curve (G = %s, hold %s) run once, %s each. ", strings.Join(r.curveOnly(), ", "), fmtDur(r.plan.holds[0]), fmtDur(r.plan.curveDur))
	w("Every run is on a fresh client, warmed up in two steps before it is timed: G goroutines Acquire and Release keys of their own together, %d times, ", warmUpRounds)
	w("so that the client's pool holds the connections G callers use (%s); ", r.poolNote())
	w("then %d of them (all G when G is smaller), starting together, Acquire and Release one shared warm-up key %d times each, so that the contended path has run too: ", contendedWarmUpWorkers, contendedWarmUps)
	w("lockguard's waiters are woken through a pub/sub connection that its Client dials the first time one of them waits, and without this step the first wait of the timed run would pay that dial; ")
	w("the peers' waiters poll over the pooled connections, already dialled. The step is the same for every contender; ")
	w("it is capped at %d goroutines because a polling peer gives the key to about one waiter per poll interval, so with all G it would take seconds per run (at G=1 there is no contention, in the warm-up as in the timed run).\n\n", contendedWarmUpWorkers)
	w("The floor is `1 / (hold + 1.5 x PING p50)`, with the PING p50 measured interleaved with the uncontended operations (section 1: %s): ", fmtDur(r.rtt()))
	w("a perfect lock hands over in half a round trip (the release reaching Redis) plus one (the next holder hearing of it). ")
	if gap, at := r.fastestGap(); at != nil {
		if f := r.rtts(gap); f > 1.5 {
			w("Under load a Redis round trip takes longer than that PING: the fastest hand-off gap p50 below among configurations with at least %d hand-offs (%s, %s, G=%d, hold %s) is %.1f PING round trips where the model counts 1.5. ",
				minGaps, fmtDur(gap), at.name, at.goroutines, fmtDur(at.hold), f)
		} else {
			w("The fastest hand-off gap p50 below among configurations with at least %d hand-offs (%s, %s, G=%d, hold %s) is %.1f PING round trips, within the model's 1.5. ",
				minGaps, fmtDur(gap), at.name, at.goroutines, fmtDur(at.hold), f)
		}
	}
	w("The floor is an idealised bound: it counts no CPU time for the client or the server, and the PING it uses was measured with one goroutine, not under the load of G.\n\n")
	w("In the tables, each row is one contender's %d rounds of a configuration:\n\n", r.plan.contendedRounds)
	w("- **acquisitions/s**: the median of the rounds' acquisitions/s, with their range; **x floor** divides that median by the floor;\n")
	w("- **hand-off gap p50 (n)**: from the start of a Release to the return of the next Acquire *by a different goroutine*, over the hand-offs of all rounds pooled; n is the number of such hand-offs the p50 is taken from: where the releaser mostly takes the lock straight back, they are a small share of the acquisitions;\n")
	w("- **wait p99**: Acquire call to return, over the acquisitions of all rounds pooled; **max wait**: the longest wait of any round, counting waits still unfinished when their round ended;\n")
	w("- **stall probe, max late**: during each run one more goroutine sleeps %s at a time; this is the most any of its wake-ups came late in any round, a measure of the machine's and the Go runtime's scheduling stalls;\n", fmtDur(probeSleep))
	w("- **re-acquired by releaser**: share of acquisitions made by the goroutine that had released last, over all rounds pooled (starvation indicator; fair is about 1/G);\n")
	w("- **busiest / fair**: acquisitions of a round's busiest goroutine divided by the round's total/G; the median of the rounds, with their range (each round has goroutines of its own, so their counts are not added up across rounds);\n")
	w("- **round trips/acq, server time/acq**: everything the contender's client sent through its command hooks during the timed runs (including failed polls and queue entries; not pub/sub subscriptions, see Method) per successful acquisition, and the Redis time of it (commandstats `usec`), over all rounds; **errors** are summed over the rounds.\n\n")
	w("The targets on G=8, hold %s are judged on these figures: throughput on the medians, max wait and busiest / fair on the worst round.\n\n", fmtDur(r.plan.holds[0]))
	for _, hold := range r.plan.holds {
		w("### Hold %s\n\n", fmtDur(hold))
		w("| G | contender | acquisitions/s, median (range) | x floor | hand-off gap p50 (n) | wait p99 | max wait | stall probe, max late | re-acquired by releaser | busiest / fair, median (range) | round trips/acq | server time/acq | errors |\n")
		w("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
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
				gap := "– (n 0)"
				if c.gaps.Len() > 0 {
					gap = fmt.Sprintf("%s (n %d)", fmtDur(c.gaps.Quantile(0.5)), c.gaps.Len())
				}
				w("| %d | %s | %s | %.2fx | %s | %s | %s | %s | %s | %s | %.1f | %.0f µs | %s |\n", g, name, c.rateSpread().count(0), c.rate()/r.contendedFloor(hold),
					gap, fmtDur(c.waits.Quantile(0.99)), fmtDur(c.maxWait()), fmtDur(c.late.Max()), pct(c.reacquiredShare()),
					c.fairSpread().ratio(), rtAcq, float64(c.serverUsec)/float64(max(c.acquisitions, 1)), errs)
			}
		}
		w("\nFloor at this hold: %.0f acquisitions/s.\n\n", r.contendedFloor(hold))
	}
	w("![Wait-time distribution, 8 goroutines, 100 µs hold](img/wait_cdf.png)\n\n")
	w("The wait plot pools the waits of all %d rounds of each contender, and shows completed acquisitions only: a goroutine that never got the lock before its round ended has no point on it, ", r.plan.contendedRounds)
	w("but its unfinished wait counts in the max wait of the legend and the tables.\n\n")
	w("![Throughput against goroutines, 100 µs hold](img/throughput.png)\n\n")
	w("The throughput plot shows, at G = %s, the medians of the tables, and at the other points their one run.\n\n", r.tableGs())
}

// poolNote describes the pool connections after warm-up, by G: the range over contenders and
// rounds.
func (r *report) poolNote() string {
	var parts []string
	for _, g := range r.plan.curve {
		var conns []float64
		for _, c := range r.contended {
			if c.goroutines == g {
				for _, n := range c.poolConns() {
					conns = append(conns, float64(n))
				}
			}
		}
		sp := spreadOf(conns)
		switch {
		case sp.n == 0:
			continue
		case sp.lo == sp.hi:
			parts = append(parts, fmt.Sprintf("G=%d: %.0f", g, sp.lo))
		default:
			parts = append(parts, fmt.Sprintf("G=%d: %.0f–%.0f", g, sp.lo, sp.hi))
		}
	}
	return "connections after warm-up, over all contenders and rounds, " + strings.Join(parts, ", ")
}

func (r *report) writeManyKeys(w func(string, ...any)) {
	w("## 3. Many keys\n\n")
	w("%d goroutines each Acquire + Release a uniformly random key out of %d, in %d rounds of %s per contender (%s in all), ",
		r.plan.manyWorkers, r.plan.manyKeys, r.plan.manyKeysRounds, fmtDur(r.plan.manyKeysDur/time.Duration(r.plan.manyKeysRounds)), fmtDur(r.plan.manyKeysDur))
	w("in an order that rotates from round to round, each round on a fresh client warmed up by %d goroutines together", r.plan.manyWorkers)
	var conns []float64
	for _, m := range r.manyKeys {
		for _, n := range m.poolConns {
			conns = append(conns, float64(n))
		}
	}
	if sp := spreadOf(conns); sp.n > 0 && sp.lo == sp.hi {
		w(" (%.0f pool connections after warm-up)", sp.lo)
	} else if sp.n > 0 {
		w(" (%.0f–%.0f pool connections after warm-up)", sp.lo, sp.hi)
	}
	w(". Operations/s is the median of the rounds, with their range; latencies, round trips and server time are over all rounds.\n\n")
	w("| contender | operations/s, median (range) | p50 | p99 | round trips/op | server time/op | errors |\n|---|---|---|---|---|---|---|\n")
	for _, m := range r.manyKeys {
		w("| %s | %s | %s | %s | %.2f | %.0f µs | %d |\n", m.name, m.rateSpread().count(0), fmtDur(m.lat.Quantile(0.5)), fmtDur(m.lat.Quantile(0.99)),
			float64(m.counts.RoundTrips)/float64(max(m.ops, 1)), float64(m.serverUsec)/float64(max(m.ops, 1)), m.errs)
	}
	w("\n")
}

func (r *report) writeRenewal(w func(string, ...any)) {
	w("## 4. Renewal of held locks\n\n")
	if len(r.renewal) == 0 || len(r.renewal[0].runs) == 0 {
		return
	}
	rn := r.renewal[0].runs[0]
	w("%d locks are acquired with a %s lease and held, in %d rounds per contender in an order that rotates from round to round; ",
		rn.locks, fmtDur(rn.lease), r.plan.renewRounds)
	w("what the client sends is counted over a window of %d lease periods (%s) while they are held, per renewal period (lease/3 = %s) and per second, and each figure is the median of the rounds with their range. ",
		r.plan.renewPeriods, fmtDur(rn.window), fmtDur(rn.lease/3))
	w("The window opens a lease and half a renewal period after the last lock was acquired, once every lock's renewal cycle has run a few times and the load of the acquisitions is gone; ")
	w("it lasts a whole number of renewal periods, so both of its ends fall at the same point of the cycle, half a period away from the ticks of the last locks acquired, and find about the same refreshes in flight (requests are counted as they complete). ")
	w("lockguard renews through its watchdog; the others run one refresh loop per lock ")
	w("that calls `Refresh` / `Extend` (naive: GET, compare, PEXPIRE) every lease/3 (the libraries' READMEs show the call, not a period: lease/3 is the watchdog's own, so both renew as often). ")
	w("One refresh per lock per period is %d refreshes; for the libraries that refresh with one script call that is %d requests and %d round trips. ", rn.locks, rn.locks, rn.locks)
	w("**refreshes/period** counts the loops' `Refresh` calls that started in the window (one per tick of a loop's ticker: fewer than due means dropped ticks) and that completed in it, ")
	w("and **Refresh p50 / p99** times the completed ones.\n\n")
	w("| contender | requests/period | round trips/period | requests/s | round trips/s | commandstats top-level/period | vs one refresh per lock | refreshes/period: started / completed | Refresh p50 / p99 | locks lost | errors |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	perSecond := func(f func(*renewalResult) float64) func(*renewalResult) float64 {
		return func(r *renewalResult) float64 { return f(r) / (r.lease / 3).Seconds() }
	}
	for _, x := range r.renewal {
		req := x.spreadOf((*renewalResult).requestsPerPeriod)
		vs := x.spreadOf(func(r *renewalResult) float64 { return 100 * r.requestsPerPeriod() / float64(r.locks) })
		refr, lat := "– (watchdog)", "–"
		if !x.renews {
			refr = fmt.Sprintf("%.0f / %s", x.spreadOf((*renewalResult).startedPerPeriod).med, x.spreadOf((*renewalResult).refreshesPerPeriod).count(0))
			l := x.refreshLat()
			lat = fmt.Sprintf("%s / %s", fmtDur(l.Quantile(0.5)), fmtDur(l.Quantile(0.99)))
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n", x.name, req.count(1), x.spreadOf((*renewalResult).roundTripsPerPeriod).count(1),
			x.spreadOf(perSecond((*renewalResult).requestsPerPeriod)).count(1), x.spreadOf(perSecond((*renewalResult).roundTripsPerPeriod)).count(1),
			x.spreadOf((*renewalResult).topLevelPerPeriod).count(1), fmt.Sprintf("%.2f%% (%.2f–%.2f%%)", vs.med, vs.lo, vs.hi), refr, lat, x.lost(), x.errs())
	}
	w("\n")
	r.writeRenewalLoad(w, rn.locks, rn.lease)
}

// writeRenewalLoad says, from the numbers, how the refresh loops loaded the client and Redis:
// how long a refresh waited, whether the loops dropped ticks, and how far queued refreshes
// moved the counts of completed ones away from the due count.
func (r *report) writeRenewalLoad(w func(string, ...any), locks int, lease time.Duration) {
	period := lease / 3
	var lats, saturated, dropped, drift []string
	for _, x := range r.renewal {
		if x.renews {
			continue
		}
		l := x.refreshLat()
		p50 := l.Quantile(0.5)
		lats = append(lats, fmt.Sprintf("%s %s / %s (%.0f PING round trips at p50; waiting for a pooled connection: %s per request on average)",
			x.name, fmtDur(p50), fmtDur(l.Quantile(0.99)), r.rtts(p50), fmtDur(x.poolWaitPerRequest())))
		if p50 >= period/10 {
			saturated = append(saturated, fmt.Sprintf("%s (p50 %s, %s of the period)", x.name, fmtDur(p50), pct(float64(p50)/float64(period))))
		}
		st := x.spreadOf((*renewalResult).startedPerPeriod)
		if st.lo < 0.98*float64(locks) {
			dropped = append(dropped, fmt.Sprintf("%s (as few as %.1f%% of the due refreshes started in a round)", x.name, 100*st.lo/float64(locks)))
		}
		c := x.spreadOf((*renewalResult).refreshesPerPeriod)
		if c.lo < 0.98*float64(locks) || c.hi > 1.02*float64(locks) {
			drift = append(drift, fmt.Sprintf("%s %.1f–%.1f%%", x.name, 100*c.lo/float64(locks), 100*c.hi/float64(locks)))
		}
	}
	if len(lats) == 0 {
		return
	}
	w("With %d locks held, a `Refresh` took, at p50 / p99: %s. Unloaded, a refresh is one round trip (naive's two), and the run's PING p50 is %s. ",
		locks, strings.Join(lats, "; "), fmtDur(r.rtt()))
	if len(saturated) > 0 {
		w("At this many locks the refresh loops of %s saturate the client and Redis: half of their refreshes took longer than a tenth of the renewal period (%s of %s), queued behind each other. ",
			strings.Join(saturated, ", "), fmtDur(period/10), fmtDur(period))
	}
	if len(dropped) > 0 {
		w("Loops fell behind and dropped ticks: %s. ", strings.Join(dropped, ", "))
	} else {
		w("Every loop still started its refreshes on time (at least 98%% of those due in every round). ")
	}
	if len(drift) > 0 {
		w("Refreshes still queued when the window opened or closed moved the completed counts away from the due count (completed per period, of those due, range over the rounds: %s): ", strings.Join(drift, ", "))
		w("in those rounds the request counts are what the client and Redis carried in the window, not exactly what the loops asked for.")
	}
	w("\n\n")
}

func (r *report) writeMethod(w func(string, ...any)) {
	w("## Method\n\n")
	w("- One `redis-server` (started by `internal/redistest`, no persistence, loopback) serves every scenario; the benchmark stops it at the end.\n")
	w("- Within each scenario the contenders run one after another in an order that rotates from round to round or configuration to configuration, so background load hits all of them alike; ")
	w("the uncontended, contended, many-keys and renewal scenarios run every contender in several rounds and report the median with the range. ")
	w("In the contended scenario that holds for the configurations (goroutines, hold) of its tables: %d rounds of %s per contender, each round running every configuration once, the order rotating from configuration to configuration and from round to round; ",
		r.plan.contendedRounds, fmtDur(r.plan.contendedDur))
	w("acquisitions/s is the median of the rounds with the range, busiest / fair the median with the range, max wait the worst round, and the other figures pool all rounds. ")
	w("The other points of its throughput curve run once per contender (%s). ", fmtDur(r.plan.curveDur))
	w("Each contender gets a fresh Redis client and its own keys per run, and is warmed up before timing: scripts loaded, and, in the contended and many-keys scenarios, ")
	w("as many goroutines as the run uses Acquire and Release keys of their own together (%d times), so the pool has dialled its connections; ", warmUpRounds)
	w("in the contended scenario %d of those goroutines (all of them when fewer) then Acquire and Release one shared warm-up key together (%d times each), so that the contended path has run as well: ", contendedWarmUpWorkers, contendedWarmUps)
	w("lockguard's Client dials the pub/sub connection that wakes its waiters the first time one of them waits, and the peers poll over the pooled connections.\n")
	w("- Latencies are wall-clock times around the library calls, in the same process; percentiles are exact nearest-rank values over all samples.\n")
	w("- Round trips are counted by a go-redis hook (`ProcessHook` calls plus `ProcessPipelineHook` calls) when each call returns, so a call still waiting for a pooled connection when a window closes is not counted in it; requests count each command of a pipeline. ")
	w("Pub/sub messages to lockguard's waiters arrive on their subscription connection and are not round trips; the SUBSCRIBE and UNSUBSCRIBE that go-redis sends on that connection bypass its hooks and are not counted (well under 0.01 per acquisition: a waiter's Client subscribes once per key it waits on). ")
	w("`INFO commandstats` deltas, read by a separate client, cross-check the hook; Redis counts commands run inside scripts there as well, so only the commands a contender sends itself are summed, and script-internal calls are shown apart.\n")
	w("- The contended critical section busy-spins (it keeps a CPU, like real work). On a %d-core machine the client goroutines, the Redis server and the measuring code share the CPUs, which caps every contender alike.\n", r.machine.cores)
	w("- The run's Redis round trip is the p50 of a PING reference (one PING per operation on a client like the contenders') measured in the rotation of the uncontended rounds, ")
	w("so that it sees the same CPU and scheduling state as the lock operations; PINGs sent back to back between scenarios are shown for comparison only.\n")
	w("- Ratios are to floors measured in the same run: the bare `SET NX PX` + `DEL` pair for uncontended latency (the target is judged on the median of the per-round ratios, each a contender's p50 over the floor's p50 in the same round), ")
	w("`1 / (hold + 1.5 x PING p50)` with the interleaved PING for contended throughput.\n")
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
