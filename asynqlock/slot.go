package asynqlock

import (
	"context"
	"fmt"
	"time"

	"github.com/lockguard/lockguard/keyfunc"
)

// HeaderScheduledAt is the task header Slot reads the scheduled time from, as RFC 3339 text
// (time.RFC3339Nano). Enqueuers that know when a run was due (a cron job, a ticker loop) set
// it; asynq.Scheduler cannot, because it enqueues the same registered task on every tick.
const HeaderScheduledAt = "lockguard-scheduled-at"

// Slot is a key part naming the schedule slot a periodic task belongs to: its scheduled time
// truncated to period, rendered as UTC "20060102T150405Z" (with a fraction for sub-second
// periods). The scheduled time is the HeaderScheduledAt header when the task has one (a
// malformed value fails with keyfunc.ErrInvalid) and otherwise the time the middleware
// started processing the task, because asynq gives a handler neither the enqueue time nor
// the scheduler's tick. Slots are aligned to the zero time, so every replica computes the
// same slots for the same period. It panics if period is not positive.
//
// Caveat of processing time: a task processed in a later slot than it was scheduled for (a
// backlog, a retry) counts for the slot it runs in. Keep queue latency well below the period.
func Slot(period time.Duration) keyfunc.Part {
	if period <= 0 {
		panic("asynqlock: Slot period must be positive")
	}
	return keyfunc.From("slot", func(src keyfunc.Source) (string, error) {
		s, _ := src.(*source)
		var t time.Time
		if v, ok := src.Value(keyfunc.KindHeader, HeaderScheduledAt); ok {
			var err error
			if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return "", fmt.Errorf("header %s: %w", HeaderScheduledAt, keyfunc.ErrInvalid)
			}
		} else if s != nil {
			t = s.now
		} else {
			t = time.Now()
		}
		start := t.Truncate(period)
		if s != nil {
			s.slot = start
		}
		return start.UTC().Format("20060102T150405.999999999Z"), nil
	})
}

// OncePerSlot makes the task run once per schedule slot of period across every server that
// receives it: the key is scoped by Slot(period), and unless set explicitly the options
// become WithDoneMarker(max(10*period, 1 min)), WithWait(min(period/2, 10 s)) and
// WithBusy(asynq.RevokeTask). So when N replicas each run an asynq.Scheduler with the same
// entry, the first task of a slot runs, the others wait for it and are acknowledged as
// replayed, or are revoked if it is still running after the wait; if it fails, a waiting
// duplicate runs instead. It panics if period is not positive.
func OncePerSlot(period time.Duration) Option {
	if period <= 0 {
		panic("asynqlock: OncePerSlot period must be positive")
	}
	return optionFunc(func(c *config) { c.slot = period })
}

// SlotStart returns the start of the slot a Slot part computed for the task running with
// ctx, so a periodic job knows which period it is doing (the hour of a report, say).
func SlotStart(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(slotKey{}).(time.Time)
	return t, ok
}

type slotKey struct{}

func slotRetention(p time.Duration) time.Duration { return max(10*p, time.Minute) }

func slotWait(p time.Duration) time.Duration { return min(p/2, 10*time.Second) }
