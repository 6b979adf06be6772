package asynqlock_test

import (
	"context"
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
