package dlock

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// watchdog renews the leases of one Client. One goroutine serves all locks: it wakes when the
// earliest renewal is due, takes every lease due within a tenth of its lease as well, and
// renews them with one pipelined batch (see backend.renew; one per timeout class, see
// renewClaimed), so 10,000 held locks cost a handful of requests per period instead of
// 10,000. A batch runs on goroutines of its own: the loop goes on renewing the leases that
// come due meanwhile, so a batch that a silent server holds up delays no other lease. The
// loop runs only while leases are watched.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	leases  map[*lease]struct{}
	running bool
	closed  bool
	next    time.Time // when the sleeping loop wakes up; zero while it works
	wake    chan struct{}
	stop    chan struct{}
	// ctx ends at close: it interrupts the batches in flight.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop, the batches in flight and background clean-ups
}

func newWatchdog(c *Client) *watchdog {
	ctx, cancel := context.WithCancel(context.Background())
	return &watchdog{c: c, leases: map[*lease]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		ctx: ctx, cancel: cancel}
}

// add watches l: renewal a third of the lease from now. A handed-off lock holds only the
// releaser's short claim lease until its new holder renews it to its own: that renewal comes
// a third of the way into the claim lease, so a hold shorter than that (the common case under
// contention) costs no renewal at all.
//
// A lease that has ended already (its local expiry fired before add, after a slow acquire) is
// not watched: nothing would ever take it out again. Checking and inserting under w.mu, and
// setting watchedBy with it, orders add against end, which reads watchedBy to remove.
//
// On a closed watchdog add ends l at once, as close ended every lease watched then: on the
// caller's goroutine, so nothing is started that close, which may be waiting already, would
// not wait for.
func (w *watchdog) add(l *lease) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock() // end calls remove
		l.end(lost(EndClosed, "client closed"))
		return
	}
	defer w.mu.Unlock()
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.watchedBy = w
	now := time.Now()
	// A third of the lease, or of what is left of it (a hand-off's claim lease, a lease
	// watched again after a release that turned out not to be the last).
	l.renewAt = now.Add(min(l.ttl, l.deadline.Sub(now)) / 3)
	renewAt := l.renewAt
	l.mu.Unlock()
	w.leases[l] = struct{}{}
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.run()
		return
	}
	// Wake the loop only if this lease is due before it would wake anyway: acquisitions with
	// the Client lease are due after every lease already watched.
	if !w.next.IsZero() && renewAt.Before(w.next) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// retryLater schedules l's renewal again soon, several times within what is left of its
// lease (a hand-off's claim lease is short), and not batched early with others.
func (l *lease) retryLater() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.renewAt = now.Add(max(min(l.ttl/20, l.deadline.Sub(now)/4), 10*time.Millisecond))
	l.retrying = true
}

// renewBy moves l's next renewal to at, if that is sooner, and wakes the loop for it.
func (w *watchdog) renewBy(l *lease, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.leases[l]; !ok {
		return
	}
	l.mu.Lock()
	if at.Before(l.renewAt) {
		l.renewAt = at
	}
	l.mu.Unlock()
	if !w.next.IsZero() && at.Before(w.next) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// idleLinger is how long the loop waits for new leases before it exits, so a Client that
// takes a lock now and then does not start a goroutine for each.
const idleLinger = 10 * time.Second

func (w *watchdog) remove(l *lease) {
	w.mu.Lock()
	delete(w.leases, l)
	w.mu.Unlock()
}

// background runs a clean-up that Close must wait for. It reports whether fn was started:
// not once Close has stopped taking background work.
func (w *watchdog) background(fn func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		fn()
	}()
	return true
}

func (w *watchdog) run() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next, ok := w.collect()
		if !ok {
			return
		}
		if len(due) > 0 {
			// The batch runs on its own: the loop goes on with the leases due meanwhile.
			if due = w.claim(due); len(due) > 0 {
				w.wg.Add(1) // within the loop's own count: close waits for it
				go func() {
					defer w.wg.Done()
					w.renewClaimed(due)
				}()
			}
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-w.wake:
		case <-w.stop:
			return
		}
	}
}

// collect returns the leases due now (or within a tenth of their lease, so renewals batch; a
// handed-off lease awaiting confirmation is not renewed early, so a short hold needs no
// renewal at all) and the time of the next renewal, which it records as the loop's wake-up
// time. Leases in a batch still in flight are left out: the end of their batch wakes the loop
// (see settle). With nothing to watch it returns idleLinger from now, and ok is false once the
// loop has been idle that long: it must exit.
func (w *watchdog) collect() (due []*lease, next time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.closed {
		w.running, w.next = false, time.Time{}
		return nil, next, false
	}
	if len(w.leases) == 0 {
		if !w.next.IsZero() && !now.Before(w.next) {
			w.running, w.next = false, time.Time{}
			return nil, next, false
		}
		if w.next.IsZero() {
			w.next = now.Add(idleLinger)
		}
		return nil, w.next, true
	}
	for l := range w.leases {
		l.mu.Lock()
		at, slack, batched := l.renewAt, l.ttl/10, l.batched
		if l.confirm || l.retrying {
			slack = 0
		}
		l.mu.Unlock()
		if batched {
			continue
		}
		if !at.After(now.Add(slack)) {
			due = append(due, l)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if len(due) == 0 && next.IsZero() {
		next = now.Add(idleLinger) // every lease is in flight: the end of its batch wakes the loop
	}
	w.next = next // zero while renewing: every add wakes the loop then
	return due, next, true
}

// claim takes the renewing token of each lease of due and returns those it got. A lease with
// a Refresh in flight is left out and retried later: two renewals must not cross. A lease
// claimed is in flight until its answer is applied (see settle): collect leaves it out
// meanwhile, so the loop, which does not wait for a batch, never sends it twice.
func (w *watchdog) claim(due []*lease) []*lease {
	return slices.DeleteFunc(due, func(l *lease) bool {
		select {
		case l.renewing <- struct{}{}:
			l.mu.Lock()
			l.batched = true
			l.mu.Unlock()
			return false
		default:
			l.retryLater()
			return true
		}
	})
}

// renewClaimed renews due, claimed by claim, in one batch: in timeout classes (see
// renewClass) called in parallel. A call is given up after a third of the shortest lease it
// renews, so a short lease (a handed-off WithTTL lease confirmed to what is left of its ttl)
// must not share the call of long ones, or under a latency of more than its third every long
// lease in the batch would fail its renewal with it, time after time. Leases of one length,
// the common case, make one class: one call, one round trip per node. The loop runs it on a
// goroutine of its own: a batch that a silent server holds up must not hold up the leases that
// come due meanwhile (a hand-off's confirmation is due a third into a claim lease of a few
// seconds). Close interrupts the calls in flight.
func (w *watchdog) renewClaimed(due []*lease) {
	if len(due) == 0 {
		return
	}
	rs := make([]renewal, len(due))
	byClass := map[int]int{} // timeout class -> its position in classes
	var classes [][]int
	for i, l := range due {
		rs[i] = renewal{key: l.key, owner: l.owner, names: l.names, ttl: l.renewTTL()}
		tc := timeoutClass(rs[i].ttl)
		c, seen := byClass[tc]
		if !seen {
			c = len(classes)
			byClass[tc] = c
			classes = append(classes, nil)
		}
		classes[c] = append(classes[c], i)
	}
	inParallel(classes, func(idx []int) { w.renewClass(w.ctx, pick(due, idx), pick(rs, idx)) })
}

// inParallel calls fn with each group of positions, in parallel, and returns once every call
// has: on the calling goroutine when there is one group, the common case.
func inParallel(groups [][]int, fn func(idx []int)) {
	if len(groups) == 1 {
		fn(groups[0])
		return
	}
	var wg sync.WaitGroup
	for _, idx := range groups {
		wg.Go(func() { fn(idx) })
	}
	wg.Wait()
}

// renewTimeout is how long a renewal to ttl is waited for: a third of the lease, when the
// next one is due (at least 10 ms).
func renewTimeout(ttl time.Duration) time.Duration { return max(ttl/3, 10*time.Millisecond) }

// timeoutClass puts renewals whose timeouts are within a factor of two of each other in one
// class: none is given up before half its own timeout.
func timeoutClass(ttl time.Duration) int {
	return bits.Len64(uint64(renewTimeout(ttl) / (10 * time.Millisecond)))
}

// renewClass sends the renewals rs of due, given up after the shortest renewTimeout among
// them: one renew call per part of the store (see backend.renewParts; one node of a Cluster),
// called in parallel, so that each part's answers are applied as soon as they come. A silent
// node must not hold up the answers of the others (a hand-off confirmed on a node that
// answers at once would be lost, its claim lease ending while the silent node's call runs),
// nor the retries of those that failed.
func (w *watchdog) renewClass(ctx context.Context, due []*lease, rs []renewal) {
	timeout := time.Duration(math.MaxInt64)
	for _, r := range rs {
		timeout = min(timeout, renewTimeout(r.ttl))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	inParallel(w.c.be.renewParts(ctx, rs), func(idx []int) { w.renewPart(ctx, sent, pick(due, idx), pick(rs, idx)) })
}

// renewPart sends the renewals rs of due, sent at sent, in one call. A call given up while it
// may still reach Redis (a go-redis client without ContextTimeoutEnabled lets it go on) keeps
// its leases' tokens until it is over, as Refresh does for its own calls: a Refresh that took
// a token now could be applied first and then cut short by the late renewal. Its answers
// count then: one that comes before a lease's local deadline renews the lease (the script
// found the lock still ours). Thrown away, the renewal would be sent again only once the late
// call is over, with that much less of the lease left, into the same latency. Each node's
// late call is waited for on its own, for the same reason as above.
func (w *watchdog) renewPart(ctx context.Context, sent time.Time, due []*lease, rs []renewal) {
	ok, err := w.c.be.renew(ctx, rs)
	failed := make([]bool, len(rs))
	for i := range failed {
		failed[i] = renewFailed(err, i)
	}
	var late *lateRenewError
	if !errors.As(err, &late) {
		w.settle(due, rs, sent, ok, failed, err)
		return
	}
	if ok == nil {
		ok = make([]bool, len(rs))
	}
	onTheWay := make([]bool, len(rs))
	for _, p := range late.parts {
		for _, i := range p.idx {
			onTheWay[i] = true
		}
	}
	var now []int
	for i := range due {
		if !onTheWay[i] {
			now = append(now, i)
		}
	}
	w.settle(pick(due, now), pick(rs, now), sent, pick(ok, now), pick(failed, now), err)
	// The leases of a late call stay in flight (out of collect) until its answers come.
	for _, p := range late.parts {
		w.wg.Add(1) // within the batch's own count: close waits for it
		go func() {
			defer w.wg.Done()
			ok, failed := p.wait()
			w.settle(pick(due, p.idx), pick(rs, p.idx), sent, pick(ok, p.idx), pick(failed, p.idx), err)
		}()
	}
}

// pick returns the elements idx of s.
func pick[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = s[i]
	}
	return out
}

// settle applies the answers to the renewals rs of due, sent at sent, and gives the leases
// their tokens back: ok[i] renewed, !ok[i] lost, failed[i] outcome unknown (retried). It
// wakes the loop, which left the leases out while they were in flight and may now have to
// wake earlier for them.
func (w *watchdog) settle(due []*lease, rs []renewal, sent time.Time, ok, failed []bool, err error) {
	if len(due) == 0 {
		return
	}
	renewed, unknown := 0, 0
	for i, l := range due {
		switch {
		case l.releasing(), failed[i]:
			// Releasing: its release takes it out, or, if a hold turns out to be left after
			// all, renews it later. Failed: if no renewal gets through, the local expiry ends
			// the lease before Redis can hand the lock to someone else.
			if failed[i] {
				unknown++
			}
			l.retryLater()
		case ok[i]:
			if !l.extended(sent, rs[i].ttl) {
				// Ended before the answer came: the holder was told the lock is lost, and
				// Redis now holds it for a whole lease that nobody uses.
				w.free(l)
				break
			}
			renewed++
			l.mu.Lock()
			l.renewAt = sent.Add(l.ttl / 3)
			l.retrying = false
			l.confirm = false
			fixed := !l.auto
			l.mu.Unlock()
			if fixed {
				w.remove(l) // a handed-off fixed lease needs only its confirmation
			}
		default:
			l.end(lost(EndTaken, "renewal found the lock gone or owned by another owner"))
		}
		// The token first: a collect that finds the lease out of its batch must be able to
		// claim it (the wake-up below brings the loop back to the leases it skipped).
		<-l.renewing
		l.mu.Lock()
		l.batched = false
		l.mu.Unlock()
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	w.c.tel.renewed(renewed)
	if unknown > 0 {
		w.c.log.Warn("dlock: renewal failed; retrying", "locks_failed", unknown, "locks", len(rs), "err", err)
	}
}

// free releases in Redis, in the background, the lock of l, which ended on our clock before
// a renewal that Redis applied was answered, so that a waiter gets it now rather than once
// that renewal's lease ends. The release script's owner check keeps this safe whatever
// happened since. It releases the first hold: a re-entrant hold still open keeps the lock
// until the holder releases it (a release of a lost hold is sent to Redis too). Not once
// Close has begun: locks held at Close expire at the end of their lease.
func (w *watchdog) free(l *lease) {
	w.background(func() {
		ctx, cancel := w.c.boundedContext(context.Background())
		defer cancel()
		_, err := w.c.be.release(ctx, releaseRequest{key: l.key, owner: l.owner, entry: "1", names: l.names})
		if err != nil {
			w.c.log.Warn("dlock: freeing a lock renewed after it was lost failed; it expires at the end of its lease",
				"key_hash", KeyHash(l.key), "err", err)
		}
	})
}

// lateRenewError is the error of a renew call given up by its context while some of its calls
// were still on their way: one part for each such call, naming its renewals (positions in rs),
// whose wait blocks until that call is over (for at most releaseBound) and returns ok and
// failed, indexed as rs, with its answers set (what is still unanswered stays failed).
type lateRenewError struct {
	err   error
	parts []lateRenewal
}

type lateRenewal struct {
	idx  []int
	wait func() (ok, failed []bool)
}

func (e *lateRenewError) Error() string { return e.err.Error() }
func (e *lateRenewError) Unwrap() error { return e.err }

// close stops the loop, ends every watched lease and waits for background work.
func (w *watchdog) close() {
	w.mu.Lock()
	w.closed = true
	leases := make([]*lease, 0, len(w.leases))
	for l := range w.leases {
		leases = append(leases, l)
	}
	w.mu.Unlock()
	close(w.stop)
	w.cancel()
	for _, l := range leases {
		l.end(lost(EndClosed, "client closed"))
	}
	w.wg.Wait()
}
