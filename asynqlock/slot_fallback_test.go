package asynqlock_test

import (
	"context"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// "*/15 * * * *" kept in America/New_York (asynq.SchedulerOpts{Location}), with
// OncePerSlot(15m) and WithSlotLocation(ny). On Sunday 1 November 2026 the clocks go back at
// 02:00 EDT (06:00Z): the wall hour 01:00-02:00 happens twice, and robfig/cron (asynq's
// Scheduler) ticks in both, every 15 minutes: 8 ticks between 05:00Z and 06:45Z, each a
// different 15 minutes of real time. Each runs, and its SlotStart holds it.
func TestFallBackHourQuarterHourSlots(t *testing.T) {
	e := newEnv(t)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		ran   = map[string]bool{} // scheduled time (UTC) -> ran
		start = map[string]time.Time{}
	)
	job := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		at := task.Headers()[asynqlock.HeaderScheduledAt]
		s, _ := asynqlock.SlotStart(ctx)
		mu.Lock()
		ran[at] = true
		start[at] = s
		mu.Unlock()
		return nil
	})
	mux := asynq.NewServeMux()
	mux.Handle("report:15m", asynqlock.Wrap(job, e.lock, keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType)),
		asynqlock.OncePerSlot(15*time.Minute), asynqlock.WithSlotLocation(ny)))
	e.startServer(t, serverConfig(1), mux) // one worker: ticks processed in order
	c, insp := e.client(t), e.inspector(t)

	first := time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC) // 01:00 EDT
	var ticks []string
	for i := range 8 {
		at := first.Add(time.Duration(i) * 15 * time.Minute)
		s := at.In(ny).Format(time.RFC3339)
		ticks = append(ticks, s)
		info := e.enqueue(t, c, asynq.NewTaskWithHeaders("report:15m", nil,
			map[string]string{asynqlock.HeaderScheduledAt: s}), asynq.MaxRetry(0), asynq.Retention(time.Minute))
		taskState(t, insp, info, asynq.TaskStateCompleted, 10*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	var skipped []string
	for _, s := range ticks {
		if !ran[s] {
			skipped = append(skipped, s)
		}
	}
	for _, s := range ticks {
		at, _ := time.Parse(time.RFC3339, s)
		if st, ok := start[s]; ok && (st.After(at) || !at.Before(st.Add(15*time.Minute))) {
			t.Errorf("tick %s: SlotStart %s does not hold the tick", s, st.UTC().Format(time.RFC3339))
		}
	}
	if len(skipped) > 0 {
		t.Fatalf("%d of %d quarter-hour ticks on the fall-back day never ran (acknowledged as replayed): %v",
			len(skipped), len(ticks), skipped)
	}
}
