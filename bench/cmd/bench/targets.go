package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
)

// target is one goal from the issues, judged on the run's numbers.
type target struct {
	what     string
	goal     string
	measured string
	pass     bool
	skipped  bool
}

func passFail(t target) string {
	switch {
	case t.skipped:
		return "not measured"
	case t.pass:
		return "**PASS**"
	default:
		return "**FAIL**"
	}
}

// targets judges lockguard against its performance goals.
func (r *report) targets() []target {
	var ts []target
	lg, floor := r.findUnc(contenders.Lockguard), r.findUnc(floorName)
	if lg != nil && floor != nil {
		rt := lg.perOp(lg.counts.RoundTrips)
		ts = append(ts, target{
			what: "Uncontended round trips per Acquire+Release", goal: "2",
			measured: fmt.Sprintf("%.2f (commandstats: %.2f top-level requests per op)", rt, lg.perOp(lg.topLevel)),
			pass:     rt <= 2.005,
		})
		sp := lg.ratioSpread(floor)
		pooled := float64(lg.lat.Quantile(0.5)) / float64(floor.lat.Quantile(0.5))
		ts = append(ts, target{
			what: "Uncontended p50 vs bare SET NX + DEL (median of per-round ratios)", goal: "≤ 1.2x",
			measured: fmt.Sprintf("%.2fx, median of %d rounds (range %.2f–%.2fx); over all rounds %s vs %s (%.2fx)",
				sp.med, sp.n, sp.lo, sp.hi, fmtDur(lg.lat.Quantile(0.5)), fmtDur(floor.lat.Quantile(0.5)), pooled),
			pass: sp.med <= 1.2,
		})
	}
	hold := r.plan.holds[0]
	if c := r.findContended(contenders.Lockguard, 8, hold); c != nil {
		n := len(c.runs)
		var waits []string
		for _, run := range c.runs {
			waits = append(waits, fmtDur(run.maxWait()))
		}
		ts = append(ts, target{
			what: fmt.Sprintf("Contended (8 goroutines, 100 µs): max wait, worst of %d rounds", n), goal: "< 10 ms",
			measured: fmt.Sprintf("%s (by round: %s; a goroutine sleeping %s in the same runs woke up to %s late)",
				fmtDur(c.maxWait()), strings.Join(waits, ", "), fmtDur(probeSleep), fmtDur(c.late.Max())),
			pass: c.maxWait() < maxWaitGoal,
		})
		fair := c.fairSpread()
		ts = append(ts, target{
			what: fmt.Sprintf("Contended (8 goroutines, 100 µs): busiest goroutine vs fair share, worst of %d rounds", n), goal: "≤ 2x",
			measured: fmt.Sprintf("%.2fx (median %.2fx)", fair.hi, fair.med), pass: fair.hi <= 2,
		})
		var best *contendedResult
		for _, name := range contenders.Names[1:] {
			if p := r.findContended(name, 8, hold); p != nil && (best == nil || p.rate() > best.rate()) {
				best = p
			}
		}
		if best != nil && best.rate() > 0 {
			ratio := c.rate() / best.rate()
			ts = append(ts, target{
				what: fmt.Sprintf("Contended (8 goroutines, 100 µs): throughput vs best peer, medians of %d rounds", n), goal: "≥ 0.8x",
				measured: fmt.Sprintf("%.2fx (acquisitions/s: lockguard %s, %s %s; per round, lockguard over %s in the same round: %s)",
					ratio, c.rateSpread().countRange(0), best.name, best.rateSpread().countRange(0), best.name, spreadOf(rateRatios(c, best)).ratioRange()),
				pass: ratio >= 0.8,
			})
		}
	}
	for _, x := range r.renewal {
		if x.name != contenders.Lockguard || len(x.runs) == 0 {
			continue
		}
		locks := x.runs[0].locks
		base := float64(locks) // one refresh request (and round trip) per lock per period
		req, rt := x.spreadOf((*renewalResult).requestsPerPeriod), x.spreadOf((*renewalResult).roundTripsPerPeriod)
		ts = append(ts, target{
			what: fmt.Sprintf("Renewal of %d held locks: requests and round trips per period vs one refresh per lock (median of %d rounds)", locks, len(x.runs)),
			goal: "≤ 1%",
			measured: fmt.Sprintf("%.2f%% of requests (%s, vs %d), %.3f%% of round trips (%s, vs %d); %d locks lost",
				100*req.med/base, req.countRange(1), locks, 100*rt.med/base, rt.countRange(1), locks, x.lost()),
			pass: req.med/base <= 0.01 && rt.med/base <= 0.01 && x.lost() == 0,
		})
	}
	t := target{what: "Gin middleware: p99 added latency at low load", goal: "< 3 PING round trips"}
	if g := r.gin; g != nil && g.available {
		added := g.addedP99()
		limit := 3 * r.rtt()
		t.measured = fmt.Sprintf("%s (%.1f PING round trips of %s, interleaved PING p50)", fmtDur(added), r.rtts(added), fmtDur(r.rtt()))
		if sp := g.roundAddedP99(); sp.n > 1 {
			t.measured += fmt.Sprintf("; per round %s µs", sp.countRange(0))
		}
		if b, f := g.row(routeBare, g.lowConns), g.row(routeFloor, g.lowConns); b != nil && f != nil {
			t.measured += fmt.Sprintf("; a bare SET NX + DEL around the handler adds %s", fmtDur(f.p99-b.p99))
		}
		t.pass = added < limit
	} else {
		t.skipped = true
		t.measured = "scenario not run: " + r.ginReason()
	}
	ts = append(ts, t)
	return ts
}

func (r *report) ginReason() string {
	if r.gin == nil {
		return "no result"
	}
	return r.gin.reason
}

// scriptFloorNote says what the script mechanism alone costs over the bare pair, or nothing
// when the reference was not measured.
func (r *report) scriptFloorNote() string {
	sf, floor := r.findUnc(scriptFloorName), r.findUnc(floorName)
	if sf == nil || floor == nil {
		return ""
	}
	return fmt.Sprintf("Two calls of a script that does nothing take %s at p50 (per round, over the bare pair: %s): that much is the price of any lock that is taken and freed by scripts. ",
		fmtDur(sf.lat.Quantile(0.5)), sf.ratioSpread(floor).ratioRange())
}

// fencedMinNote says what the fenced minimum costs over the bare pair, or nothing when the
// reference was not measured.
func (r *report) fencedMinNote() string {
	fm, floor := r.findUnc(fencedMinName), r.findUnc(floorName)
	if fm == nil || floor == nil {
		return ""
	}
	sp := fm.ratioSpread(floor)
	verdict := "within"
	if sp.med > 1.2 {
		verdict = "already above"
	}
	return fmt.Sprintf("Two scripts that make one read and one write each, the least a lock that keeps a fencing token across holders can do with one script per step, take %s at p50 "+
		"(per round, over the bare pair: %s, %s the 1.2x target; %.1f µs of server time per operation). ",
		fmtDur(fm.lat.Quantile(0.5)), sp.ratioRange(), verdict, fm.perOp(fm.serverUsec))
}

// perCallNote prices one call made inside lockguard's scripts: its server time over that of
// the empty-script reference, per inner call, against a bare SET or DEL sent by the client.
func (r *report) perCallNote(lg, floor *uncontendedResult) string {
	sf := r.findUnc(scriptFloorName)
	calls := lg.perOp(lg.otherCalls)
	if sf == nil || calls == 0 {
		return ""
	}
	per := (lg.perOp(lg.serverUsec) - sf.perOp(sf.serverUsec)) / calls
	return fmt.Sprintf("That is about %.1f µs per call made inside a script (the call and the Lua around it), "+
		"on top of %.1f µs to start each of the two scripts, where a SET or DEL sent by the client costs %.1f µs. ",
		per, sf.perOp(sf.serverUsec)/2, floor.perOp(floor.serverUsec)/2)
}

// clientSplit splits rest, the µs of lockguard's median per-round gap to the floor pair
// that server time does not explain, into lockguard's own client work (the p50 of its time
// outside the go-redis calls, over the pair's) and what is left: time inside the calls beyond
// the server's. The p50s are of different distributions, so the split is approximate.
func clientSplit(lg, floor *uncontendedResult, rest float64) string {
	lgC, flC := lg.client.Quantile(0.5), floor.client.Quantile(0.5)
	own := float64(lgC-flC) / float64(time.Microsecond)
	if own <= 0 {
		return fmt.Sprintf("The other %.0f µs is spent inside the go-redis calls, beyond the server's time (lockguard's own client work is %s per operation at p50, the pair's %s). ",
			rest, usOf(lgC), usOf(flC))
	}
	if own >= rest {
		return fmt.Sprintf("lockguard's own client work accounts for the other %.0f µs: %s per operation at p50 outside its Redis calls, against %s for the pair "+
			"(owner id, lease, timer, watchdog entry, telemetry, and go-redis building the script calls). ", rest, usOf(lgC), usOf(flC))
	}
	return fmt.Sprintf("Of the other %.0f µs, about %.0f µs is lockguard's own client work: %s per operation at p50 outside its Redis calls, against %s for the pair "+
		"(owner id, lease, timer, watchdog entry, telemetry, and go-redis building the script calls); "+
		"the remaining %.0f µs or so is spent inside the calls beyond the commandstats time of the server (reading and writing sockets, waiting for and being woken by replies). ",
		rest, own, usOf(lgC), usOf(flC), rest-own)
}

// cpuNote compares the whole-process CPU time per operation, Redis's and this process's, of
// lockguard and the floor pair with gap, the median per-round latency gap in µs; "" when no
// CPU time was measured.
func cpuNote(lg, floor *uncontendedResult, gap float64) string {
	if lg.ops == 0 || floor.ops == 0 || lg.serverCPU+lg.processCPU == 0 {
		return ""
	}
	ls, fs := lg.cpuPerOp(lg.serverCPU), floor.cpuPerOp(floor.serverCPU)
	lp, fp := lg.cpuPerOp(lg.processCPU), floor.cpuPerOp(floor.processCPU)
	extra := ls - fs + lp - fp
	s := fmt.Sprintf("Counted as whole-process CPU time (which adds the sockets, the event loop, and the Go runtime's threads looking for work while a reply is awaited), an operation cost Redis %.1f µs against %.1f µs for the pair (%+.1f µs) "+
		"and this process %.1f µs against %.1f µs (%+.1f µs): %+.0f µs of CPU in all, against the median gap of %.0f µs",
		ls, fs, ls-fs, lp, fp, lp-fp, extra, gap)
	switch {
	case extra >= 0.8*gap && extra <= 1.25*gap:
		where := "in Redis, running the scripts' calls"
		if lp-fp > ls-fs {
			where = "in this process"
		}
		return s + ". The client and Redis work on an operation in turn, and the extra CPU time matches the gap: consistent with CPU work on the operation's path, most of it " + where + ", rather than idle waiting (a match, not a proof: both processes' CPU time also counts work off that path). "
	case extra > 1.25*gap:
		return s + ": more than the gap, so some of it ran on the other core while the operation waited for something else. "
	}
	return s + ": the rest of the gap is time neither process spent on the CPU (waiting to be scheduled and woken). "
}

// uncontendedLoss explains lockguard's uncontended latency against the floor, from the
// numbers, or returns "" when no peer is faster and the target is met.
func (r *report) uncontendedLoss() string {
	lg, floor := r.findUnc(contenders.Lockguard), r.findUnc(floorName)
	if lg == nil || floor == nil {
		return ""
	}
	lgSp := lg.ratioSpread(floor)
	var faster []string
	for _, u := range r.uncontended {
		if u == lg || isReference(u.name) {
			continue
		}
		if sp := u.ratioSpread(floor); sp.med < lgSp.med {
			faster = append(faster, fmt.Sprintf("%s (%s)", u.name, sp.ratioRange()))
		}
	}
	if len(faster) == 0 && lgSp.med <= 1.2 {
		return ""
	}
	lgP, flP := lg.lat.Quantile(0.5), floor.lat.Quantile(0.5)
	var b strings.Builder
	fmt.Fprintf(&b, "**Uncontended latency.** lockguard's Acquire+Release p50 is %s against %s for the bare SET NX + DEL pair; per round, lockguard's p50 over the pair's: %s",
		fmtDur(lgP), fmtDur(flP), lgSp.ratioRange())
	if len(faster) > 0 {
		fmt.Fprintf(&b, "; peers with a lower median ratio: %s", strings.Join(faster, ", "))
	}
	b.WriteString(". ")
	lgRT, flRT := lg.perOp(lg.counts.RoundTrips), floor.perOp(floor.counts.RoundTrips)
	if math.Abs(lgRT-flRT) < 0.005 {
		fmt.Fprintf(&b, "Both send %.0f round trips per operation. ", lgRT)
	} else {
		fmt.Fprintf(&b, "lockguard sends %.2f round trips per operation, the pair %.2f. ", lgRT, flRT)
	}
	var diffs []float64 // per round, lockguard's p50 minus the pair's, in µs
	for i := range min(len(lg.rounds), len(floor.rounds)) {
		diffs = append(diffs, float64(lg.rounds[i]-floor.rounds[i])/float64(time.Microsecond))
	}
	gapSp := spreadOf(diffs)
	gap := gapSp.med
	lgUs, flUs := lg.perOp(lg.serverUsec), floor.perOp(floor.serverUsec)
	srv := lgUs - flUs
	switch {
	case gap <= 0:
		fmt.Fprintf(&b, "Per round, lockguard's p50 is not above the pair's at the median (difference %s µs). ", gapSp.countRange(0))
	case srv >= gap:
		fmt.Fprintf(&b, "Per round, lockguard's p50 is above the pair's by %s µs; extra Redis server time accounts for all of the median: %.1f µs per operation against %.1f µs for the pair (commandstats `usec`). ",
			gapSp.countRange(0), lgUs, flUs)
	default:
		fmt.Fprintf(&b, "Per round, lockguard's p50 is above the pair's by %s µs. Of the median %.0f µs, %.0f µs is extra Redis server time (commandstats `usec`: %.1f µs per operation against %.1f µs for the pair). ",
			gapSp.countRange(0), gap, srv, lgUs, flUs)
		b.WriteString(clientSplit(lg, floor, gap-srv))
	}
	if gap > 0 {
		b.WriteString(cpuNote(lg, floor, gap))
	}
	b.WriteString(r.scriptFloorNote())
	b.WriteString(r.fencedMinNote())
	fmt.Fprintf(&b, "lockguard's two scripts check the wait line and keep the fencing token, the hold count and the retry tombstone: they run %.0f Redis calls inside the server per operation. ",
		lg.perOp(lg.otherCalls))
	b.WriteString(r.perCallNote(lg, floor))
	b.WriteString("`go test -bench ClientOverhead ./dlock` measures lockguard's client work without Redis, in a tight loop; between network waits, as here, the same work takes several times longer.")
	return b.String()
}

// contendedLoss explains, from the numbers, where lockguard's contended throughput at hold is
// below the best peer's, or returns "".
func (r *report) contendedLoss(hold time.Duration) string {
	var worse []string
	var lgRT, peerRT, reacq, lgReacq, lgUs, peerUs, lgCore, peerCore float64
	var peerMaxWait time.Duration
	peers := 0
	for _, g := range r.plan.curve {
		c := r.findContended(contenders.Lockguard, g, hold)
		if c == nil {
			continue
		}
		var best *contendedResult
		for _, name := range contenders.Names[1:] {
			if p := r.findContended(name, g, hold); p != nil && (best == nil || p.rate() > best.rate()) {
				best = p
			}
		}
		if best == nil || best.rate() <= c.rate() {
			continue
		}
		worse = append(worse, fmt.Sprintf("%d: %.2fx of %s", g, c.rate()/best.rate(), best.name))
		if g > 1 {
			perAcq := func(x *contendedResult, n int64) float64 { return float64(n) / float64(max(x.acquisitions, 1)) }
			lgRT += perAcq(c, c.counts.RoundTrips)
			peerRT += perAcq(best, best.counts.RoundTrips)
			reacq += best.reacquiredShare()
			lgReacq += c.reacquiredShare()
			peerMaxWait = max(peerMaxWait, best.maxWait())
			lgUs += perAcq(c, c.serverUsec)
			peerUs += perAcq(best, best.serverUsec)
			lgCore += float64(c.serverUsec) / float64(c.dur.Microseconds())
			peerCore += float64(best.serverUsec) / float64(best.dur.Microseconds())
			peers++
		}
	}
	if len(worse) == 0 {
		return ""
	}
	line := fmt.Sprintf("**Contended throughput, hold %s.** lockguard's acquisitions/s against the best peer, by goroutines (medians of the rounds at G = %s, one run at the other points): %s.",
		fmtDur(hold), r.tableGs(), strings.Join(worse, "; "))
	if peers == 0 {
		return line
	}
	n := float64(peers)
	line += " Averaged over the configurations with 2 or more goroutines where a peer was faster (each over all its rounds):"
	if reacq/n > 0.5 {
		line += fmt.Sprintf(" the faster peer let the releasing goroutine take the lock straight back in %s of its acquisitions (its waiters waited up to %s)", pct(reacq/n), fmtDur(peerMaxWait))
		if lgReacq/n < 0.05 {
			line += fmt.Sprintf(", while lockguard handed releases to the next waiter in line (%s re-acquired by the releaser)", pct(lgReacq/n))
		}
		line += ";"
	}
	line += fmt.Sprintf(" a contended lockguard acquisition cost %.1f round trips against %.1f", lgRT/n, peerRT/n)
	if lgRT/n >= peerRT/n+0.05 {
		line += " (the first waiter on a key looks twice: join the line, then again once subscribed)"
	}
	line += fmt.Sprintf(", and %.0f µs of Redis time (commandstats `usec`) against %.0f", lgUs/n, peerUs/n)
	if lgUs > peerUs {
		line += fmt.Sprintf(" (the scripts that keep the line); over the run Redis spent %s of one core running lockguard's commands, %s running the peer's", pct(lgCore/n), pct(peerCore/n))
	}
	return line + "."
}

// maxWaitGoal is the target for the longest contended wait (8 goroutines, first hold).
const maxWaitGoal = 10 * time.Millisecond

// maxWaitLoss explains a contended max wait over maxWaitGoal by the run's own numbers: the
// wait a FIFO line gives at the median hand-off, and the stalls the probe saw.
func (r *report) maxWaitLoss() string {
	c := r.findContended(contenders.Lockguard, 8, r.plan.holds[0])
	if c == nil || c.maxWait() < maxWaitGoal {
		return ""
	}
	line := fmt.Sprintf("**Contended max wait, %d goroutines, hold %s.** lockguard's longest wait in %d rounds was %s (p99 %s, rounds pooled). Its line is first in, first out: "+
		"a wait spans the %d holds and hand-offs ahead of it, %s at the median hand-off gap (%s), so a stall of any holder or hand-off delays every waiter behind it. "+
		"In the same runs, a goroutine that slept %s at a time woke up to %s late (p99 %s): the machine's scheduling stalls, which no lock in the process avoids.",
		c.goroutines, fmtDur(r.plan.holds[0]), len(c.runs), fmtDur(c.maxWait()), fmtDur(c.waits.Quantile(0.99)), c.goroutines-1, fmtDur(c.nominalWait()), fmtDur(c.gaps.Quantile(0.5)),
		fmtDur(probeSleep), fmtDur(c.late.Max()), fmtDur(c.late.Quantile(0.99)))
	var peerMin time.Duration
	for _, name := range contenders.Names[1:] {
		if p := r.findContended(name, c.goroutines, c.hold); p != nil && (peerMin == 0 || p.maxWait() < peerMin) {
			peerMin = p.maxWait()
		}
	}
	if peerMin > c.maxWait() {
		line += fmt.Sprintf(" Every peer's longest wait was longer (%s or more, section 2).", fmtDur(peerMin))
	}
	return line
}

// writeLosses lists, from the numbers, where lockguard does worse than a peer.
func (r *report) writeLosses(w func(string, ...any)) {
	w("## Where we lose\n\n")
	var lines []string
	if l := r.uncontendedLoss(); l != "" {
		lines = append(lines, l)
	}
	for _, hold := range r.plan.holds {
		if l := r.contendedLoss(hold); l != "" {
			lines = append(lines, l)
		}
	}
	if l := r.maxWaitLoss(); l != "" {
		lines = append(lines, l)
	}
	var lgm *manyKeysResult
	for _, m := range r.manyKeys {
		if m.name == contenders.Lockguard {
			lgm = m
		}
	}
	if lgm != nil {
		lsp := lgm.rateSpread()
		var faster, overlap []string
		for _, m := range r.manyKeys {
			if m == lgm || m.rate() <= lgm.rate() {
				continue
			}
			sp := m.rateSpread()
			faster = append(faster, fmt.Sprintf("%s %.0f (range %.0f–%.0f; lockguard %.2fx; Redis time %.0f µs per operation)", m.name, sp.med, sp.lo, sp.hi, lgm.rate()/m.rate(),
				float64(m.serverUsec)/float64(max(m.ops, 1))))
			if lsp.hi >= sp.lo {
				overlap = append(overlap, m.name)
			}
		}
		if len(faster) > 0 {
			line := fmt.Sprintf("**Many keys.** lockguard does %.0f operations/s (median of %d rounds, range %.0f–%.0f) with %.0f µs of Redis time per operation; faster (medians): %s.",
				lsp.med, lsp.n, lsp.lo, lsp.hi, float64(lgm.serverUsec)/float64(max(lgm.ops, 1)), strings.Join(faster, "; "))
			if len(overlap) > 0 {
				line += fmt.Sprintf(" The round-to-round ranges overlap with %s: that part of the difference is within this run's noise.", strings.Join(overlap, ", "))
			}
			lines = append(lines, line)
		}
	}
	if g := r.gin; g != nil && g.available {
		line := fmt.Sprintf("**Gin.** The middleware adds %s at p99 per request at low load and keeps %.0f%% of the bare route's requests/s under load (%s).",
			fmtDur(g.addedP99()), 100*g.highRatio(), g.highNote())
		if lg, b, l := r.findUnc(contenders.Lockguard), g.row(routeBare, g.lowConns), g.row(routeLocked, g.lowConns); lg != nil && b != nil && l != nil && r.rtt() > 0 {
			added, alone := l.p50-b.p50, lg.lat.Quantile(0.5)
			cmp := fmt.Sprintf("%s more than", fmtDur(added-alone))
			if added < alone {
				cmp = fmt.Sprintf("%s less than", fmtDur(alone-added))
			}
			line += fmt.Sprintf(" At the median it adds %s, %s an uncontended lockguard Acquire+Release measured alone (%s, section 1); "+
				"that is %.1f PING round trips (interleaved PING p50 %s) for %.2f Redis round trips per request, "+
				"with the load generator, the HTTP server and Redis sharing %d CPUs.",
				fmtDur(added), cmp, fmtDur(alone), r.rtts(added), fmtDur(r.rtt()), l.roundTrips, r.machine.cores)
			if f := g.row(routeFloor, g.lowConns); f != nil {
				line += fmt.Sprintf(" Two bare commands (`SET NX PX`, `DEL`) around the same handler add %s at p50 and %s at p99 (%.1f PING round trips at p50): "+
					"in a request, each Redis round trip costs more than the PING loop shows.",
					fmtDur(f.p50-b.p50), fmtDur(f.p99-b.p99), r.rtts(f.p50-b.p50))
			}
		}
		lines = append(lines, line)
	}
	var missed []string
	for _, t := range r.targets() {
		if !t.pass && !t.skipped {
			missed = append(missed, fmt.Sprintf("%s (goal %s): %s", t.what, t.goal, t.measured))
		}
	}
	if len(missed) > 0 {
		lines = append(lines, "**Targets missed in this run.** "+strings.Join(missed, "; ")+".")
	}
	if len(lines) == 0 {
		w("Nowhere in this run: lockguard matched or beat every peer on every measured figure.\n\n")
	}
	for _, l := range lines {
		w("- %s\n", l)
	}
	w("\n")
}
