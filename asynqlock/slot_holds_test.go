package asynqlock_test

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// A slot must hold the time it was computed for: start <= t < start+period.
func TestSlotHoldsItsTime(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	west := time.FixedZone("W", -5*3600)
	for _, tc := range []struct {
		at     string
		period time.Duration
		loc    *time.Location
	}{
		{"1969-12-31T20:00:00-05:00", 7 * 24 * time.Hour, ny},
		{"1900-03-01T10:00:00-05:00", 3 * 24 * time.Hour, ny},
		{"1583-01-01T00:00:00Z", 24 * time.Hour, ny},
		{"0001-01-01T02:00:00Z", 7 * 24 * time.Hour, west},
		{"0001-01-01T02:00:00Z", 2 * 24 * time.Hour, ny},
		{"0000-06-01T02:00:00Z", 7 * 24 * time.Hour, time.UTC},
	} {
		task := asynq.NewTaskWithHeaders("w", nil, map[string]string{asynqlock.HeaderScheduledAt: tc.at})
		got, err := keyfunc.Join(asynqlock.SlotIn(tc.period, tc.loc)).Key(asynqlock.NewSource(t.Context(), task))
		if err != nil {
			t.Fatal(err)
		}
		at, _ := time.Parse(time.RFC3339, tc.at)
		start, perr := time.Parse("20060102T150405Z", got)
		if perr != nil {
			t.Errorf("%s: key %q: %v", tc.at, got, perr)
			continue
		}
		if start.After(at) || !at.Before(start.Add(tc.period+2*time.Hour)) {
			t.Errorf("%s, %s in %s: slot starts %s, after the time or too far before it", tc.at, tc.period, tc.loc, start)
		}
	}
}
