package asynqlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the slot tests, on machines without a zoneinfo database

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// Three replicas each run a server and a Scheduler with the same "@every 1s" entries, for
// 5 s: about 15 tasks of each arrive. The job under OncePerSlot runs once per one-second
// slot; the same job without the middleware runs about three times per slot.
func TestOncePerSlotThreeSchedulers(t *testing.T) {
	e := newEnv(t)
	var (
		mu       sync.Mutex
		runs     = map[time.Time]int{}
		bareRuns = map[time.Time]int{} // the control job, without the middleware
	)
	body := func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		if slot, ok := asynqlock.SlotStart(ctx); ok {
			runs[slot]++
		} else {
			bareRuns[time.Now().Truncate(time.Second)]++
		}
		mu.Unlock()
		select { // a body that takes a while, so duplicates overlap it
		case <-time.After(100 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mux := asynq.NewServeMux()
	mux.Handle("report:tick", asynqlock.Wrap(asynq.HandlerFunc(body), e.lock,
		keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType)), asynqlock.OncePerSlot(time.Second)))
	mux.HandleFunc("report:bare", body)

	schedulers := e.startReplicas(t, 3, 2, mux, "report:tick", "report:bare")
	stop := time.NewTimer(5 * time.Second)
	<-stop.C
	for _, s := range schedulers {
		s.Shutdown()
	}
	insp := e.inspector(t)
	eventually(t, 10*time.Second, "the queue to drain", func() bool {
		q, err := insp.GetQueueInfo("default")
		return err == nil && q.Pending+q.Active+q.Retry+q.Scheduled == 0
	})

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for slot, n := range runs {
		total += n
		if n != 1 {
			t.Errorf("slot %s ran %d times", slot.Format(time.TimeOnly), n)
		}
	}
	bare, repeated := 0, 0
	for _, n := range bareRuns {
		bare += n
		if n > 1 {
			repeated++
		}
	}
	t.Logf("with OncePerSlot: %d runs in %d slots; without: %d runs, %d of %d slots run more than once",
		total, len(runs), bare, repeated, len(bareRuns))
	if total < 4 || total > 6 {
		t.Errorf("%d runs in 5 s of @every 1s: want about 5", total)
	}
	if repeated == 0 || bare < 2*total {
		t.Errorf("control job without the middleware ran %d times: the replicas did not all enqueue", bare)
	}
}

func TestSlotPart(t *testing.T) {
	key := keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType), asynqlock.Slot(time.Hour))
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    string
		wantErr error
	}{
		{"scheduled header", map[string]string{asynqlock.HeaderScheduledAt: "2026-11-21T05:59:59.999Z"}, "report:20261121T050000Z", nil},
		{"header in another zone", map[string]string{asynqlock.HeaderScheduledAt: "2026-11-21T07:30:00+02:00"}, "report:20261121T050000Z", nil},
		{"malformed header", map[string]string{asynqlock.HeaderScheduledAt: "yesterday"}, "", keyfunc.ErrInvalid},
		// RFC 3339 (5.6) allows a lower-case t and z, and a leap second: the last instant of its minute.
		{"lower-case t and z", map[string]string{asynqlock.HeaderScheduledAt: "2026-11-21t05:59:59.999z"}, "report:20261121T050000Z", nil},
		{"leap second", map[string]string{asynqlock.HeaderScheduledAt: "2016-12-31T23:59:60Z"}, "report:20161231T230000Z", nil},
		{"leap second with a fraction and an offset", map[string]string{asynqlock.HeaderScheduledAt: "2017-01-01T00:59:60.5+01:00"}, "report:20161231T230000Z", nil},
		{"second 61", map[string]string{asynqlock.HeaderScheduledAt: "2016-12-31T23:59:61Z"}, "", keyfunc.ErrInvalid},
		// Go's time.Parse reads a comma before the fraction; RFC 3339 has only the dot.
		{"comma before the fraction", map[string]string{asynqlock.HeaderScheduledAt: "2026-11-21T05:59:59,5Z"}, "", keyfunc.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := key.Key(asynqlock.NewSource(t.Context(), asynq.NewTaskWithHeaders("report", nil, tc.headers)))
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("Key = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	// Without the header the slot is the processing time, truncated.
	got, err := keyfunc.Join(asynqlock.Slot(time.Millisecond)).Key(asynqlock.NewSource(t.Context(), asynq.NewTask("r", nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, perr := time.Parse("20060102T150405.999999999Z", got); perr != nil {
		t.Fatalf("slot %q does not parse: %v", got, perr)
	}
}

// The slot part is the package's own value: a key-wide keyfunc.WithMaxPartLen, a cap meant
// for the user's parts (short job codes here), does not apply to it, so OncePerSlot on such
// a key function runs the job rather than archive every run as bad input.
func TestOncePerSlotIgnoresKeyPartCap(t *testing.T) {
	e := newEnv(t)
	key := keyfunc.Join(keyfunc.Const("job"), keyfunc.Meta(keyfunc.MetaTaskType)).With(keyfunc.WithMaxPartLen(12))
	if _, err := key.Key(asynqlock.NewSource(t.Context(), asynq.NewTask("report", nil))); err != nil {
		t.Fatalf("the key function alone: %v", err)
	}
	runs := 0
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }),
		e.lock, key, asynqlock.OncePerSlot(time.Hour))
	if err := h.ProcessTask(t.Context(), asynq.NewTask("report", nil)); err != nil || runs != 1 {
		t.Fatalf("OncePerSlot task: %v, handler ran %d times; want nil and one run", err, runs)
	}
	// A part of the user's own over the cap still fails.
	_, err := keyfunc.Join(keyfunc.Const("job"), keyfunc.Meta(keyfunc.MetaTaskType), asynqlock.Slot(time.Hour)).
		With(keyfunc.WithMaxPartLen(12)).Key(asynqlock.NewSource(t.Context(), asynq.NewTask("report:monthly-totals", nil)))
	if !errors.Is(err, keyfunc.ErrTooLong) {
		t.Fatalf("a task type of 21 bytes under a 12-byte cap: %v, want ErrTooLong", err)
	}
}

// A daily job at 01:30 Berlin time, across both daylight saving changes of 2026. In UTC days
// the runs of Sunday 29 March (00:30 UTC) and Monday 30 March (23:30 UTC on Sunday) share a
// slot and Monday's would be skipped; with WithSlotLocation every local day has its own slot,
// starting at local midnight.
func TestDailySlotsFollowTheScheduleZone(t *testing.T) {
	e := newEnv(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var starts []time.Time
	job := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		runs.Add(1)
		s, _ := asynqlock.SlotStart(ctx)
		starts = append(starts, s)
		return nil
	})
	key := keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType))
	local := asynqlock.Wrap(job, e.lock, key, asynqlock.OncePerSlot(24*time.Hour), asynqlock.WithSlotLocation(berlin))
	var days []time.Time
	for _, d := range []int{28, 29, 30, 31} {
		days = append(days, time.Date(2026, 3, d, 1, 30, 0, 0, berlin))
	}
	for _, d := range []int{24, 25, 26} {
		days = append(days, time.Date(2026, 10, d, 1, 30, 0, 0, berlin))
	}
	tick := func(h asynq.Handler, at time.Time) {
		task := asynq.NewTaskWithHeaders("report:daily", nil,
			map[string]string{asynqlock.HeaderScheduledAt: at.Format(time.RFC3339Nano)})
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatalf("%s: %v", at, err)
		}
	}
	for _, d := range days {
		tick(local, d)
		tick(local, d.Add(time.Minute)) // a second replica's tick: acknowledged, not run
	}
	if runs.Load() != int64(len(days)) {
		t.Fatalf("%d runs for %d days, want one per day", runs.Load(), len(days))
	}
	for i, s := range starts {
		if want := time.Date(days[i].Year(), days[i].Month(), days[i].Day(), 0, 0, 0, 0, berlin); !s.Equal(want) {
			t.Fatalf("slot of %s starts %s, want local midnight %s", days[i], s, want)
		}
	}

	// The same ticks in UTC days (the default) put 29 and 30 March in one slot.
	runs.Store(0)
	utc := asynqlock.Wrap(job, e.lock, keyfunc.Join(keyfunc.Const("utc")), asynqlock.OncePerSlot(24*time.Hour))
	for _, d := range days[:4] {
		tick(utc, d)
	}
	if runs.Load() != 3 {
		t.Fatalf("UTC days: %d runs for the 4 March ticks, want 3 (the case WithSlotLocation is for)", runs.Load())
	}
}

// Weekly slots in a zone start on Monday at local midnight, like time.Truncate's weeks.
func TestWeeklySlotInZone(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	key := keyfunc.Join(asynqlock.SlotIn(7*24*time.Hour, ny))
	for _, at := range []time.Time{
		time.Date(2026, 11, 2, 0, 0, 0, 0, ny),   // Monday
		time.Date(2026, 11, 5, 12, 0, 0, 0, ny),  // Thursday
		time.Date(2026, 11, 8, 23, 59, 0, 0, ny), // Sunday night
	} {
		task := asynq.NewTaskWithHeaders("w", nil, map[string]string{asynqlock.HeaderScheduledAt: at.Format(time.RFC3339)})
		got, err := key.Key(asynqlock.NewSource(t.Context(), task))
		want := time.Date(2026, 11, 2, 0, 0, 0, 0, ny).UTC().Format("20060102T150405Z")
		if err != nil || got != want {
			t.Fatalf("week of %s: %q, %v; want %q (Monday 2 November, local midnight)", at, got, err, want)
		}
	}
}

// OncePerSlot locks per slot, so a run that outlasts its slot does not keep the next slot's
// run out. The recipe in docs/asynqlock.md keeps runs of one job apart: a plain lock on the
// same key inside the slot lock, which skips (revokes) the next slot's run when the
// previous one is still going after the wait. Two replicas, each with a scheduler on
// "@every 1s", runs of 2 s: with the inner lock never two at once; the control job without
// it overlaps.
func TestOncePerSlotRunsApartWithInnerLock(t *testing.T) {
	e := newEnv(t)
	type gauge struct{ running, max, runs atomic.Int64 }
	body := func(g *gauge) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			n := g.running.Add(1)
			defer g.running.Add(-1)
			for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
			}
			g.runs.Add(1)
			select {
			case <-time.After(2 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}
	var apart, control gauge
	jobKey := keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType))
	mux := asynq.NewServeMux()
	mux.Handle("report:payout", asynqlock.Wrap(
		asynqlock.Wrap(body(&apart), e.lock, jobKey, asynqlock.WithWait(500*time.Millisecond), asynqlock.WithBusy(asynq.RevokeTask)),
		e.lock, jobKey, asynqlock.OncePerSlot(time.Second)))
	mux.Handle("report:control", asynqlock.Wrap(body(&control), e.lock, jobKey, asynqlock.OncePerSlot(time.Second)))
	schedulers := e.startReplicas(t, 2, 4, mux, "report:payout", "report:control")
	time.Sleep(5 * time.Second)
	for _, s := range schedulers {
		s.Shutdown()
	}
	eventually(t, 10*time.Second, "runs to end", func() bool { return apart.running.Load()+control.running.Load() == 0 })
	t.Logf("with the inner lock: %d runs, at most %d at once; without: %d runs, at most %d at once",
		apart.runs.Load(), apart.max.Load(), control.runs.Load(), control.max.Load())
	if apart.max.Load() != 1 || apart.runs.Load() < 2 {
		t.Fatalf("with the inner lock: %d runs, at most %d at once; want runs one at a time", apart.runs.Load(), apart.max.Load())
	}
	if control.max.Load() < 2 {
		t.Fatalf("control without the inner lock: at most %d at once; the test no longer shows the overlap", control.max.Load())
	}
}

// startReplicas starts n replicas, each an asynq server with concurrency workers and a
// Scheduler with an "@every 1s" entry (MaxRetry 0) for each task type.
func (e *env) startReplicas(t *testing.T, n, concurrency int, h asynq.Handler, types ...string) []*asynq.Scheduler {
	t.Helper()
	var schedulers []*asynq.Scheduler
	for range n {
		e.startServer(t, serverConfig(concurrency), h)
		s := asynq.NewSchedulerFromRedisClient(e.srv.Client(t), &asynq.SchedulerOpts{LogLevel: asynq.FatalLevel})
		for _, typ := range types {
			if _, err := s.Register("@every 1s", asynq.NewTask(typ, nil), asynq.MaxRetry(0)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		schedulers = append(schedulers, s)
	}
	return schedulers
}
