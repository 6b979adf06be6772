package asynqlock

import (
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/keyfunc"
)

// Processing time a little before a boundary (a worker whose clock is behind the scheduler's,
// reading a tick made on the boundary) counts for the slot that starts there; a second
// before, it is still the slot before. The scheduled-time header is taken as it is.
func TestSlotLeadBeforeBoundary(t *testing.T) {
	boundary := time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC)
	key := keyfunc.Join(Slot(time.Hour))
	for _, tc := range []struct {
		now  time.Time
		want string
	}{
		{boundary.Add(-50 * time.Millisecond), "20261121T060000Z"},
		{boundary.Add(-2 * time.Second), "20261121T050000Z"},
		{boundary.Add(59 * time.Minute), "20261121T060000Z"},
	} {
		src := newSource(t.Context(), asynq.NewTask("r", nil), DefaultMaxPayload)
		src.now = tc.now
		if got, err := key.Key(src); err != nil || got != tc.want {
			t.Errorf("processed at %s: %q, %v; want %q", tc.now.Format(time.TimeOnly), got, err, tc.want)
		}
	}
	at := boundary.Add(-50 * time.Millisecond).Format(time.RFC3339Nano)
	src := newSource(t.Context(), asynq.NewTaskWithHeaders("r", nil, map[string]string{HeaderScheduledAt: at}), DefaultMaxPayload)
	if got, err := key.Key(src); err != nil || got != "20261121T050000Z" {
		t.Errorf("scheduled at %s: %q, %v; want the slot before the boundary", at, got, err)
	}
}

// Over every daylight saving change of 2026 in zones that move by an hour (both
// hemispheres), by half an hour (Lord Howe Island), by two hours (Troll), at a quarter to
// the hour (Chatham) or at midnight (Santiago, Beirut), each minute's sub-day slot starts at
// the latest instant at or before it whose wall clock is a multiple of the period, or, where
// the clock jumped over such a time, at the first instant after the jump. In the hour repeated
// when the clocks go back, that is an instant of the same pass: a tick there gets a slot of its
// own, not one of the first pass that ran already.
func TestSubDaySlotStartAcrossClockChanges(t *testing.T) {
	periods := []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour}
	for _, zone := range []string{"America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Antarctica/Troll", "Pacific/Chatham", "America/Santiago", "Asia/Beirut"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, change := range clockChanges(loc, 2026) {
			for _, period := range periods {
				for t0 := change.Add(-13 * time.Hour); t0.Before(change.Add(13 * time.Hour)); t0 = t0.Add(time.Minute) {
					got, want := slotStart(t0, period, loc), bruteSlotStart(t0, period, loc)
					if !got.Equal(want) || got.Location() != loc {
						t.Fatalf("%s, period %v, t %s: slot start %s, want %s", zone, period,
							t0.In(loc).Format(time.RFC3339), got.In(loc).Format(time.RFC3339), want.In(loc).Format(time.RFC3339))
					}
				}
			}
		}
	}
}

// A wall time that a clock change skips gives the instant of the change, the first one at or
// after it, also where the clock jumps by two hours (Troll) or at a quarter to the hour
// (Chatham), where time.Date reads the missing time past the change, and on a calendar day
// the zone skipped whole (Apia); a wall time the day has twice gives the first.
func TestLocalTimeInGap(t *testing.T) {
	for _, tc := range []struct {
		zone   string
		y      int
		m      time.Month
		d      int
		wall   time.Duration
		change string
	}{
		{"Antarctica/Troll", 2026, time.March, 29, 2 * time.Hour, "2026-03-29T01:00:00Z"},
		{"Pacific/Chatham", 2026, time.September, 27, 3 * time.Hour, "2026-09-26T14:00:00Z"},
		{"America/New_York", 2026, time.March, 8, 2*time.Hour + 30*time.Minute, "2026-03-08T07:00:00Z"},
		{"America/Santiago", 2026, time.September, 6, 0, "2026-09-06T04:00:00Z"},
		// Samoa skipped 30 December 2011: its clock went from 29 December 23:59:59 (UTC-10)
		// to 31 December 00:00 (UTC+14). The skipped day starts where the next one does.
		{"Pacific/Apia", 2011, time.December, 30, 0, "2011-12-30T10:00:00Z"},
		// Not a gap: Amman went from 01:00 (+03) back to 00:00 (+02) on 29 October 2021, so
		// its midnight came twice. The first is meant.
		{"Asia/Amman", 2021, time.October, 29, 0, "2021-10-28T21:00:00Z"},
		{"Asia/Amman", 2021, time.October, 29, 30 * time.Minute, "2021-10-28T21:30:00Z"},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := time.Parse(time.RFC3339, tc.change)
		if got := localTime(tc.y, tc.m, tc.d, tc.wall, loc); !got.Equal(want) {
			t.Errorf("%s %d-%02d-%02d %v: %s, want the change at %s", tc.zone, tc.y, tc.m, tc.d, tc.wall,
				got.In(loc).Format(time.RFC3339), want.In(loc).Format(time.RFC3339))
		}
	}
}

// clockChanges returns the instants in year at which loc's UTC offset changes.
func clockChanges(loc *time.Location, year int) []time.Time {
	var out []time.Time
	t := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)
	_, off := t.In(loc).Zone()
	for end := t.AddDate(1, 0, 0); t.Before(end); t = t.Add(15 * time.Minute) {
		if _, o := t.In(loc).Zone(); o != off {
			out, off = append(out, t), o
		}
	}
	return out
}

// bruteSlotStart walks back from t (a whole minute) minute by minute to the slot's start.
func bruteSlotStart(t time.Time, period time.Duration, loc *time.Location) time.Time {
	for s := t; ; s = s.Add(-time.Minute) {
		w := wallClock(s.In(loc))
		if w%period == 0 {
			return s
		}
		before := s.Add(-time.Minute).In(loc)
		prev := wallClock(before)
		if before.Day() != s.In(loc).Day() || w > prev+time.Minute && w/period != prev/period {
			// A day that starts after a gap, or a clock that jumped forward over a multiple of
			// period. (A clock that went back stays in the slot it went back into.)
			return s
		}
	}
}

// SlotStart of a SlotIn(period, loc) slot is a time in loc, for sub-day and whole-day
// periods alike, so a handler reading "the hour of the report" gets loc's hour, not that of
// the scheduled time's offset or of time.Local.
func TestSlotStartIsInScheduleLocation(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		period time.Duration
		loc    *time.Location
		at     string // the scheduled time, as the enqueuer's clock wrote it
		want   string // the slot start, in loc
	}{
		{"hourly New York", time.Hour, ny, "2026-06-01T15:00:00Z", "2026-06-01T11:00:00-04:00"},
		{"daily New York", 24 * time.Hour, ny, "2026-06-01T15:00:00Z", "2026-06-01T00:00:00-04:00"},
		// A period that neither divides a day nor is made of days is truncated as in UTC,
		// and still given in the schedule's zone.
		{"7 hours New York", 7 * time.Hour, ny, "2026-06-01T15:10:00Z", "2026-06-01T10:00:00-04:00"},
		// A UTC schedule's slot is given in UTC whatever offset the enqueuer wrote.
		{"hourly UTC, offset header", time.Hour, time.UTC, "2026-06-01T11:20:00-04:00", "2026-06-01T15:00:00Z"},
		{"daily UTC, offset header", 24 * time.Hour, time.UTC, "2026-06-01T23:20:00-04:00", "2026-06-02T00:00:00Z"},
	} {
		key := keyfunc.Join(SlotIn(tc.period, tc.loc))
		src := newSource(t.Context(), asynq.NewTaskWithHeaders("r", nil, map[string]string{HeaderScheduledAt: tc.at}), DefaultMaxPayload)
		if _, err := key.Key(src); err != nil {
			t.Fatal(err)
		}
		if src.slot.Location() != tc.loc || src.slot.Format(time.RFC3339) != tc.want {
			t.Errorf("%s: SlotIn(%v, %s), scheduled %s: slot start %s in %q (Hour() = %d); want %s in %q",
				tc.name, tc.period, tc.loc, tc.at, src.slot.Format(time.RFC3339), src.slot.Location(), src.slot.Hour(), tc.want, tc.loc)
		}
	}
}
