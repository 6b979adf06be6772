package asynqlock_test

import (
	"context"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// Zones whose daylight saving starts at midnight (00:00 -> 01:00) have no midnight that day:
// the daily slot starts at the day's first instant (01:00), not at 23:00 of the day before,
// so SlotStart names the right day.
func TestDailySlotStartWhereMidnightIsSkipped(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		zone string
		y    int
		m    time.Month
		d    int
	}{
		{"America/Santiago", 2022, time.September, 11},
		{"America/Havana", 2024, time.March, 10},
		{"America/Asuncion", 2023, time.October, 1},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		var start time.Time
		var key string
		job := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			start, _ = asynqlock.SlotStart(ctx)
			return nil
		})
		h := asynqlock.Wrap(job, e.lock, keyfunc.Join(keyfunc.Const(tc.zone)),
			asynqlock.OncePerSlot(24*time.Hour), asynqlock.WithSlotLocation(loc))
		at := time.Date(tc.y, tc.m, tc.d, 12, 0, 0, 0, loc) // noon of the DST day
		task := asynq.NewTaskWithHeaders("report:daily", nil,
			map[string]string{asynqlock.HeaderScheduledAt: at.Format(time.RFC3339)})
		key, _ = keyfunc.Join(asynqlock.SlotIn(24*time.Hour, loc)).Key(asynqlock.NewSource(t.Context(), task))
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatal(err)
		}
		firstInstant := time.Date(tc.y, tc.m, tc.d, 1, 0, 0, 0, loc) // 00:00 does not exist
		if !start.Equal(firstInstant) || start.In(loc).Day() != tc.d {
			t.Errorf("%s: slot of %s starts %s (key %s), want %s: the day's first instant, on day %d",
				tc.zone, at, start.In(loc), key, firstInstant, tc.d)
		}
	}
}

// Where clocks go back across midnight, midnight comes twice: Asia/Amman on 29 October 2021
// went from 01:00 (+03) back to 00:00 (+02). The day starts at the first (21:00 UTC), so a
// task scheduled at 00:30 of either pass, or at noon, is in a slot that starts at or before
// it, and the day has one slot.
func TestDailySlotStartWhereMidnightRepeats(t *testing.T) {
	e := newEnv(t)
	amman, err := time.LoadLocation("Asia/Amman")
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2021, 10, 28, 21, 0, 0, 0, time.UTC)
	var start time.Time
	job := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		start, _ = asynqlock.SlotStart(ctx)
		return nil
	})
	h := asynqlock.Wrap(job, e.lock, keyfunc.Join(keyfunc.Const("amman")),
		asynqlock.OncePerSlot(24*time.Hour), asynqlock.WithSlotLocation(amman))
	keys := map[string]bool{}
	for _, at := range []string{"2021-10-29T00:30:00+03:00", "2021-10-29T00:30:00+02:00", "2021-10-29T12:00:00+02:00"} {
		task := asynq.NewTaskWithHeaders("report:daily", nil, map[string]string{asynqlock.HeaderScheduledAt: at})
		key, err := keyfunc.Join(asynqlock.SlotIn(24*time.Hour, amman)).Key(asynqlock.NewSource(t.Context(), task))
		if err != nil {
			t.Fatal(err)
		}
		keys[key] = true
		start = time.Time{}
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatal(err)
		}
		if !start.IsZero() && !start.Equal(want) { // zero: replayed, the day's run was done
			t.Errorf("scheduled %s: SlotStart %s, want %s (the first midnight)", at,
				start.In(amman).Format(time.RFC3339), want.In(amman).Format(time.RFC3339))
		}
	}
	if len(keys) != 1 {
		t.Errorf("one day, %d slots: %v", len(keys), keys)
	}
}

// WithSlotLocation says where OncePerSlot counts its slots: without OncePerSlot it would do
// nothing, so building the middleware panics.
func TestWithSlotLocationNeedsOncePerSlot(t *testing.T) {
	e := newEnv(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	key := keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType))
	_ = asynqlock.Wrap(h, e.lock, key, asynqlock.OncePerSlot(time.Hour), asynqlock.WithSlotLocation(berlin))
	_ = asynqlock.Wrap(h, e.lock, key, asynqlock.WithSlotLocation(nil)) // nil, the default (UTC), asks for nothing
	defer func() {
		if p, _ := recover().(string); !strings.Contains(p, "WithSlotLocation without OncePerSlot") {
			t.Fatalf("panic %q; want one naming WithSlotLocation without OncePerSlot", p)
		}
	}()
	_ = asynqlock.Wrap(h, e.lock, key, asynqlock.WithSlotLocation(berlin))
}
