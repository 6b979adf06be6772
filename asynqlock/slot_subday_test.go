package asynqlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// "0 */6 * * *" kept in Europe/London (asynq.SchedulerOpts{Location}), with OncePerSlot(6h)
// and WithSlotLocation(london). On 29 March 2026 (01:00 GMT -> 02:00 BST) the 00:00 GMT
// (00:00Z) and 06:00 BST (05:00Z) ticks would share the UTC slot 00:00Z-06:00Z; periods that
// divide a day are counted on the local wall clock, so every tick has its own slot.
func TestSixHourSlotsAcrossDST(t *testing.T) {
	e := newEnv(t)
	london, err := time.LoadLocation("Europe/London")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	job := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs.Add(1); return nil })
	h := asynqlock.Wrap(job, e.lock, keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType)),
		asynqlock.OncePerSlot(6*time.Hour), asynqlock.WithSlotLocation(london))
	ticks := 0
	for _, d := range []int{28, 29, 30} {
		for _, hr := range []int{0, 6, 12, 18} {
			at := time.Date(2026, 3, d, hr, 0, 0, 0, london)
			task := asynq.NewTaskWithHeaders("report:6h", nil,
				map[string]string{asynqlock.HeaderScheduledAt: at.Format(time.RFC3339)})
			if err := h.ProcessTask(t.Context(), task); err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			ticks++
		}
	}
	if runs.Load() != int64(ticks) {
		t.Fatalf("%d runs for %d six-hourly ticks in London, want one per tick", runs.Load(), ticks)
	}
}
