package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// watchdog renews the leases of one Client. One goroutine serves all locks: it wakes when the
// earliest renewal is due, takes every lease due within a tenth of its lease as well, and renews
// them with one pipelined batch (see backend.renew), so 10,000 held locks cost a handful of
// requests per period instead of 10,000. The goroutine runs only while leases are watched.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	leases  map[*lease]struct{}
	running bool
	closed  bool
	next    time.Time // when the sleeping loop wakes up; zero while it works
	wake    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup // the loop and background clean-ups
}

func newWatchdog(c *Client) *watchdog {
	return &watchdog{c: c, leases: map[*lease]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// add watches l: renewal a third of the lease from now. A handed-off lock holds only the
// releaser's short claim lease until its new holder renews it to its own: that renewal comes
// a third of the way into the claim lease, so a hold shorter than that (the common case under
// contention) costs no renewal at all.
//
// A lease that has ended already (its local expiry fired before add, after a slow acquire) is
// not watched: nothing would ever take it out again. Checking and inserting under w.mu, and
// setting watchedBy with it, orders add against end, which reads watchedBy to remove.
func (w *watchdog) add(l *lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.wg.Add(1)
		go func() { // not under w.mu: end calls remove
			defer w.wg.Done()
			l.end(lost("client closed"))
		}()
		return
	}
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
			w.renew(due)
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
// time. With nothing to watch it returns idleLinger from now, and ok is false once the loop
// has been idle that long: it must exit.
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
		at, slack := l.renewAt, l.ttl/10
		if l.confirm || l.retrying {
			slack = 0
		}
		l.mu.Unlock()
		if !at.After(now.Add(slack)) {
			due = append(due, l)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	w.next = next // zero while renewing: every add wakes the loop then
	return due, next, true
}

func (w *watchdog) renew(due []*lease) {
	// A lease with a Refresh in flight waits for a retry: two renewals must not cross.
	due = slices.DeleteFunc(due, func(l *lease) bool {
		select {
		case l.renewing <- struct{}{}:
			return false
		default:
			l.retryLater()
			return true
		}
	})
	var err error
	defer func() {
		// A renewal given up while its call may still reach Redis keeps its lease's token
		// until the call is over, as Refresh does for its own calls: a Refresh that took it
		// now could be applied first and then cut short by the late renewal. The others
		// (renewed, or refused) give it back at once.
		var late []*lease
		var fl *inFlightError
		inFlight := errors.As(err, &fl)
		for i, l := range due {
			if inFlight && renewFailed(err, i) {
				late = append(late, l)
				continue
			}
			<-l.renewing
		}
		if len(late) > 0 {
			go func() {
				afterInFlight(err)
				for _, l := range late {
					<-l.renewing
				}
			}()
		}
	}()
	if len(due) == 0 {
		return
	}
	rs := make([]renewal, len(due))
	timeout := time.Duration(1<<63 - 1)
	for i, l := range due {
		rs[i] = renewal{key: l.key, owner: l.owner, names: l.names, ttl: l.renewTTL()}
		timeout = min(timeout, rs[i].ttl/3)
	}
	// A renewal is useless after a third of the lease: the next one is due by then.
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 10*time.Millisecond))
	defer cancel()
	go func() { // Close interrupts an in-flight batch.
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	sent := time.Now()
	var ok []bool
	ok, err = w.c.be.renew(ctx, rs)
	renewed, failed := 0, 0
	for i, l := range due {
		releasing := l.releasing()
		unknown := renewFailed(err, i)
		if unknown {
			failed++
		}
		switch {
		case releasing, unknown:
			// Releasing: its release takes it out, or, if a hold turns out to be left after
			// all, renews it later. Failed: if no renewal gets through, the local expiry ends
			// the lease before Redis can hand the lock to someone else.
			l.retryLater()
		case ok[i]:
			renewed++
			l.extended(sent, rs[i].ttl)
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
			l.end(lost("renewal found the lock gone or owned by another owner"))
		}
	}
	w.c.tel.renewed(renewed)
	if err != nil {
		w.c.log.Warn("dlock: renewal failed; retrying", "locks_failed", failed, "locks", len(rs), "err", err)
	}
}

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
	for _, l := range leases {
		l.end(lost("client closed"))
	}
	w.wg.Wait()
}
