package asynqlock

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/lockguard/lockguard/keyfunc"
)

// HeaderScheduledAt is the task header Slot reads the scheduled time from, as RFC 3339 text
// (time.RFC3339Nano; "t" and "z" may be lower case, and a leap second, :60, counts as the
// last instant of its minute). Enqueuers that know when a run was due (a cron job, a ticker
// loop) set it. asynq.Scheduler cannot: it enqueues the task given to Register on every tick,
// and its PreEnqueueFunc could only write the header into that one shared task, from a
// goroutine of each tick's own, racing with the enqueue of the tick before.
const HeaderScheduledAt = "lockguard-scheduled-at"

// parseScheduledAt reads a HeaderScheduledAt value: RFC 3339, which time.RFC3339Nano reads
// but for the lower-case "t" and "z" and the leap second that RFC 3339 allows, and for the
// comma before a fraction, which time.Parse reads and RFC 3339 does not allow.
func parseScheduledAt(v string) (time.Time, error) {
	if strings.Contains(v, ",") {
		return time.Time{}, fmt.Errorf("%q is not RFC 3339: a comma before the fraction", v)
	}
	v = strings.ToUpper(v) // nothing else in RFC 3339 text has a case
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil && len(v) > 19 && v[17:19] == "60" {
		// 23:59:60 is the leap second inserted after 23:59:59: the last instant of that minute.
		if t, err = time.Parse(time.RFC3339Nano, v[:17]+"59"+v[19:]); err == nil {
			t = t.Truncate(time.Second).Add(time.Second - 1)
		}
	}
	return t, err
}

// Slot is a key part naming the schedule slot a periodic task belongs to: its scheduled time
// truncated to period, rendered as UTC "20060102T150405Z" (with a fraction for sub-second
// periods). The scheduled time is the HeaderScheduledAt header when the task has one (a
// malformed value fails with keyfunc.ErrInvalid) and otherwise the time the middleware
// started processing the task, because asynq gives a handler neither the enqueue time nor
// the scheduler's tick. Slots are aligned to the zero time, so every replica computes the
// same slots for the same period: slots of whole days are UTC days (see SlotIn for a
// schedule in another time zone). The part has no length cap: a key-wide
// keyfunc.WithMaxPartLen does not apply to it. It panics if period is not positive.
//
// Caveats of processing time: a task processed in a later slot than it was scheduled for (a
// backlog, a retry) counts for the slot it runs in, so keep queue latency well below the
// period, or enqueue the task from a loop of your own that sets the header. A task
// processed less than min(period/10, 1 s) before a slot boundary counts for the
// slot that starts there: a tick on the boundary, read on a worker whose clock is a little
// behind the scheduler's, must not fall into the slot before it.
func Slot(period time.Duration) keyfunc.Part { return SlotIn(period, time.UTC) }

// SlotIn is Slot for a schedule kept in loc (asynq.SchedulerOpts.Location, CRON_TZ): slots
// of whole days (period a multiple of 24 h) start at loc's midnights, counted in calendar
// days, so a daily job at 01:30 local time gets a slot per day across daylight saving
// changes (UTC days would put two of its runs in one slot once a year, and skip one); a
// period that divides a day (6 h, 15 min) splits each local day by its wall clock, for the
// same reason; in the hour that clocks going back repeat, slots that start within it (periods
// of up to that hour) start again in the second pass, whose ticks are runs of their own. A day without a midnight (some zones start daylight saving at 00:00) starts
// at its first instant; a day whose midnight comes twice (clocks going back across it), at
// the first. Other periods are the same as Slot's. A nil loc means UTC. It panics
// if period is not positive.
func SlotIn(period time.Duration, loc *time.Location) keyfunc.Part {
	if period <= 0 {
		panic("asynqlock: Slot period must be positive")
	}
	if loc == nil {
		loc = time.UTC
	}
	return keyfunc.From("slot", func(src keyfunc.Source) (string, error) {
		s, _ := src.(*source)
		var t time.Time
		if v, ok := src.Value(keyfunc.KindHeader, HeaderScheduledAt); ok {
			var err error
			if t, err = parseScheduledAt(v); err != nil {
				return "", fmt.Errorf("header %s: %w", HeaderScheduledAt, keyfunc.ErrInvalid)
			}
		} else {
			t = time.Now()
			if s != nil {
				t = s.now
			}
			t = t.Add(slotLead(period))
		}
		start := slotStart(t, period, loc)
		if s != nil {
			s.slot = start
		}
		return start.UTC().Format("20060102T150405.999999999Z"), nil
	}).MaxLen(0) // a value of ours: a key-wide WithMaxPartLen, meant for request data, does not apply
}

// slotLead is how early before a slot boundary processing time already counts for the slot
// that starts there.
func slotLead(period time.Duration) time.Duration { return min(period/10, time.Second) }

// daysToUnixEpoch is the number of days from the zero time (Monday, January 1 of year 1),
// to which time.Truncate aligns, to January 1, 1970.
const daysToUnixEpoch = 719162

// slotStart is the start of the slot of period holding t: t truncated to period, or, in a
// zone other than UTC, counted by loc's calendar and wall clock, so that a schedule kept in
// loc keeps one slot per tick across daylight saving changes: whole days start at loc's
// midnight (a run of period/24h calendar days, aligned like time.Truncate, so weeks start on
// Mondays), and periods that divide a day split the local day by its wall clock. Other
// periods are truncated as in UTC.
func slotStart(t time.Time, period time.Duration, loc *time.Location) time.Time {
	const day = 24 * time.Hour
	switch {
	case loc == time.UTC || period%day != 0 && day%period != 0:
		// In loc, not in t's zone: the header's offset, or the worker's Local.
		return t.Truncate(period).In(loc)
	case period < day:
		return subDayStart(t, period, loc)
	}
	days := calendarDay(t.In(loc)) + daysToUnixEpoch
	n := int64(period / day)
	days -= (days%n + n) % n // floored: before year 1 too
	y, m, d := time.Unix((days-daysToUnixEpoch)*86400, 0).UTC().Date()
	return localTime(y, m, d, 0, loc)
}

// subDayStart is slotStart for a period that divides a day, in a zone with clock changes:
// the latest instant at or before t whose wall clock is a multiple of period, or, where the
// clock jumped forward over such a time (a daylight saving gap, a day that starts after
// midnight), the instant of the jump.
//
// Counted back from t itself, the start keeps t's UTC offset, so in the hour that a change
// back to standard time repeats, a tick in the second pass gets a slot of its own, not the
// first pass's. A start that would lie before the change to t's offset is looked for on the
// clock as it was before the change, unless the change jumped forward over a multiple of
// period: the slot then starts at the change. A change back stays in the slot that was
// running (in a zone that goes back by two hours, 01:00 of the second pass is in the 2-hour
// slot that began at 02:00 of the first, not in the one that began at 00:00 and ended).
func subDayStart(t time.Time, period time.Duration, loc *time.Location) time.Time {
	for range 4 { // each round moves to an earlier offset; a change is months from the next
		lt := t.In(loc)
		start := t.Add(-(wallClock(lt) % period)).In(loc)
		changed, _ := lt.ZoneBounds()
		if changed.IsZero() || !start.Before(changed) {
			return start
		}
		// The clock changed between the multiple and t: compare its reading just before the
		// change with the one at the change, counted on from the earlier day.
		before, after := changed.Add(-time.Nanosecond).In(loc), changed.In(loc)
		from, to := wallClock(before), wallClock(after)+time.Duration(calendarDay(after)-calendarDay(before))*24*time.Hour
		if to > from && to/period > from/period {
			return after
		}
		t = changed.Add(-time.Nanosecond)
	}
	return t.Add(-(wallClock(t.In(loc)) % period)).In(loc)
}

// calendarDay numbers the date t shows on its calendar: days since January 1, 1970.
func calendarDay(t time.Time) int64 {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// wallClock is the time of day t shows on its clock.
func wallClock(t time.Time) time.Duration {
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
		time.Duration(t.Second())*time.Second + time.Duration(t.Nanosecond())
}

// localTime is the instant of wall time wall on day y-m-d in loc. A wall time that day does
// not have (a daylight saving gap; some zones skip midnight itself) gives the first instant
// of that day's clock at or after it; a day the zone does not have at all, the first instant
// after it.
func localTime(y int, m time.Month, d int, wall time.Duration, loc *time.Location) time.Time {
	t := firstPass(time.Date(y, m, d, 0, 0, 0, int(wall), loc), loc)
	// A day the zone skipped whole (Samoa went from 29 to 31 December 2011): time.Date gives
	// an instant of the day before. The skipped day's slot starts where the next day does,
	// at the change.
	day := calendarDay(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
	if lt := t.In(loc); calendarDay(lt) < day {
		if _, end := lt.ZoneBounds(); !end.IsZero() && calendarDay(end.In(loc)) > day {
			return end
		}
	}
	// In a gap, time.Date reads the wall time with the offset of one side of the change: the
	// instant it gives lies past the change by the size of the jump (two hours in a zone that
	// moves by two), or before it. The first instant at or after the missing wall time is the
	// change itself.
	if lt := t.In(loc); lt.Day() == d && wallClock(lt) != wall {
		start, end := lt.ZoneBounds()
		if wallClock(lt) > wall && !start.IsZero() {
			t = start
		} else if wallClock(lt) < wall && !end.IsZero() {
			t = end
		}
	}
	for range 8 {
		lt := t.In(loc)
		ly, lm, ld := lt.Date()
		if ly == y && lm == m && ld == d && lt.Sub(firstPass(time.Date(y, m, d, 0, 0, 0, 0, loc), loc)) >= 0 &&
			time.Duration(lt.Hour())*time.Hour+time.Duration(lt.Minute())*time.Minute >= wall.Truncate(time.Minute) {
			break
		}
		t = t.Add(15 * time.Minute)
	}
	return t
}

// firstPass is t, or, when loc's clocks went back over t's wall time that day (Asia/Amman
// on 29 October 2021 went from 01:00 back to 00:00, so that its midnight came twice), the
// first instant showing it: time.Date may give either, and a day or a slot starts at the
// first.
func firstPass(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	start, _ := lt.ZoneBounds()
	if start.IsZero() {
		return t
	}
	_, before := start.Add(-time.Nanosecond).In(loc).Zone()
	_, now := lt.Zone()
	back := time.Duration(before-now) * time.Second
	if back <= 0 {
		return t
	}
	if earlier := t.Add(-back).In(loc); earlier.Before(start) && calendarDay(earlier) == calendarDay(lt) && wallClock(earlier) == wallClock(lt) {
		return earlier
	}
	return t
}

// OncePerSlot makes the task run once per schedule slot of period across every server that
// receives it: the key is scoped by Slot(period), and unless set explicitly the options
// become WithDoneMarker(max(10*period, 1 min)), WithWait(min(period/2, 10 s)) and
// WithBusy(asynq.RevokeTask). So when N replicas each run an asynq.Scheduler with the same
// entry, the first task of a slot runs, the others wait for it and are acknowledged as
// replayed, or are revoked if it is still running after the wait; if it fails, a waiting
// duplicate runs instead. The lock is per slot: a run that outlasts its slot does not keep
// the next slot's run out. To keep runs of a job apart, wrap the handler in a plain lock on
// the same key inside this one (docs/asynqlock.md, recipe 3). It panics if period is not
// positive.
func OncePerSlot(period time.Duration) Option {
	if period <= 0 {
		panic("asynqlock: OncePerSlot period must be positive")
	}
	return optionFunc(func(c *config) { c.slot = period })
}

// WithSlotLocation makes OncePerSlot count slots in loc, the time zone the schedule is kept
// in: whole days by loc's calendar, periods that divide a day by its wall clock (see SlotIn).
// Default UTC, asynq.Scheduler's default Location; nil is the default. Without OncePerSlot
// there are no slots to count: New and Wrap panic (but for nil, which asks for nothing).
func WithSlotLocation(loc *time.Location) Option {
	return optionFunc(func(c *config) { c.slotLoc = loc })
}

// SlotStart returns the start of the slot a Slot part computed for the task running with
// ctx, so a periodic job knows which period it is doing (the hour of a report, say). The time
// is in the schedule's zone: UTC for Slot, loc for SlotIn, whatever offset the scheduled-at
// header was written with and whatever the worker's local zone is.
func SlotStart(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(slotKey{}).(time.Time)
	return t, ok
}

type slotKey struct{}

func slotRetention(p time.Duration) time.Duration {
	if p > math.MaxInt64/10 {
		return math.MaxInt64 // 10*p would overflow: a "once, ever" period keeps its marker
	}
	return max(10*p, time.Minute)
}

func slotWait(p time.Duration) time.Duration { return min(p/2, 10*time.Second) }
