package asynqlock

import (
	"testing"
	"time"

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
