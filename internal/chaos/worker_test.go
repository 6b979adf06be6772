//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

// An asynq payment worker runs as a separate OS process: the test binary re-executed with
// CHAOS_ASYNQ_WORKER set. TestMain belongs to the lock-level faults, so the dispatch is here.
func init() {
	if os.Getenv("CHAOS_ASYNQ_WORKER") != "" {
		os.Exit(asynqWorkerProcess())
	}
}

const (
	payQueue    = "payments"
	payTaskType = "payment:apply"
	workerLease = 2 * time.Second // dlock lease in the worker: a killed worker's locks expire fast
)

// payStore is the payments ledger on a Redis the faults do not touch: an applied marker per
// payment, a balance and a log of applied payment ids.
type payStore struct{ rdb *redis.Client }

func (s payStore) appliedKey(id string) string { return "pay:" + id + ":applied" }

// asynqWorkerProcess is the body of a worker process. It prints one line per event on stdout
// (unbuffered, so a SIGKILL loses nothing written) and runs until SIGTERM.
func asynqWorkerProcess() int {
	var outMu sync.Mutex
	emit := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("CHAOS_ASYNQ_REDIS")})
	defer rdb.Close()
	store := payStore{redis.NewClient(&redis.Options{Addr: os.Getenv("CHAOS_ASYNQ_STORE")})}
	defer store.rdb.Close()
	locks := dlock.New(rdb, dlock.WithLease(workerLease), dlock.WithRetryInterval(100*time.Millisecond))
	defer locks.Close()

	check := os.Getenv("CHAOS_ASYNQ_CHECK") == "true" // look the payment up before applying it
	type ranKey struct{}
	mux := asynq.NewServeMux()
	// Outermost: one line per delivery with what became of it.
	mux.Use(func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			ran := new(bool)
			err := next.ProcessTask(context.WithValue(ctx, ranKey{}, ran), t)
			var locked *asynqlock.ErrLocked
			switch {
			case errors.As(err, &locked):
				emit("OUT busy")
			case err != nil:
				emit("OUT error %v", err)
			case *ran:
				emit("OUT ran")
			default:
				emit("OUT done_marker")
			}
			return err
		})
	})
	mux.Use(asynqlock.New(locks, keyfunc.Join(keyfunc.Const("payment"), keyfunc.JSON("payment_id")),
		asynqlock.WithDoneMarker(time.Hour), asynqlock.WithRetryIn(time.Second)))
	mux.HandleFunc(payTaskType, func(ctx context.Context, t *asynq.Task) error {
		*ctx.Value(ranKey{}).(*bool) = true
		var p struct {
			ID     string `json:"payment_id"`
			Amount int64  `json:"amount"`
		}
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		lk, _ := asynqlock.FromContext(ctx)
		// The naive steps, run under the payment's lock: look the payment up, call the
		// provider, commit (balance, marker and log in one transaction), send a receipt.
		n, err := store.rdb.Exists(ctx, store.appliedKey(p.ID)).Result()
		if err != nil {
			return err
		}
		if n == 1 && check {
			emit("SEEN %s", p.ID) // committed by a run killed before its done marker
			return nil
		}
		pause(ctx, time.Duration(30+rand.IntN(40))*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_, err = store.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
			tx.Set(ctx, store.appliedKey(p.ID), lk.Token(), 0)
			tx.IncrBy(ctx, "balance", p.Amount)
			tx.RPush(ctx, "log", p.ID)
			return nil
		})
		if err != nil {
			return err
		}
		emit("COMMIT %s", p.ID)
		pause(ctx, time.Duration(10+rand.IntN(30))*time.Millisecond)
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              8,
		Queues:                   map[string]int{payQueue: 1},
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		IsFailure:                asynqlock.IsFailure,
		RetryDelayFunc:           asynqlock.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 500 * time.Millisecond }),
		LogLevel:                 asynq.ErrorLevel,
	})
	if err := srv.Start(mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	srv.Shutdown()
	return 0
}

// asynqWorker is one worker process as the test sees it.
type asynqWorker struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// workerEvents counts the event lines of every worker process.
type workerEvents struct {
	mu     sync.Mutex
	counts map[string]int
	commit map[string]int // payment id -> commits seen
}

func (e *workerEvents) add(line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case "OUT":
		outcome, _, _ := strings.Cut(rest, " ")
		e.counts["out_"+outcome]++
	case "COMMIT":
		e.commit[rest]++
		e.counts["commit"]++
	default:
		e.counts[strings.ToLower(kind)]++
	}
}

func (e *workerEvents) get(k string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[k]
}

func startAsynqWorker(t *testing.T, name, queueAddr, storeAddr string, check bool, ev *workerEvents) *asynqWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHAOS_ASYNQ_WORKER="+name, "CHAOS_ASYNQ_REDIS="+queueAddr, "CHAOS_ASYNQ_STORE="+storeAddr,
		"CHAOS_ASYNQ_CHECK="+strconv.FormatBool(check))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = logf.Close()
	w := &asynqWorker{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ev.add(sc.Text())
		}
		_ = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-w.done })
	return w
}

// ageLeases moves the lease of every active task 61 s into the past: what the next asynq
// server's recoverer would see 30 s (asynq's fixed lease) plus 30 s (its allowance for clock
// skew) after the worker died. asynq lets neither be configured, and its recoverer polls
// once a minute (and once at start), so without this a redelivery takes 60-120 s.
func ageLeases(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	ctx := context.Background()
	key := "asynq:{" + payQueue + "}:lease"
	ids, err := rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	past := float64(time.Now().Add(-61 * time.Second).Unix())
	for _, id := range ids {
		if err := rdb.ZAddXX(ctx, key, redis.Z{Score: past, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return len(ids)
}

// Fault 11: asynq payment workers (separate processes, asynqlock with done markers) are
// SIGKILLed twice mid-run; each payment is enqueued twice. The tasks the dead workers held are
// redelivered by asynq's lease recovery to the next worker. With a handler that looks the
// payment up in its store before applying it (under the lock), every payment must be applied
// exactly once. Without that look-up the done marker alone leaves a window, a crash between
// the commit and the marker, which the second subtest measures rather than fails on.
func TestFaultAsynqWorkerKilled(t *testing.T) {
	t.Run("done marker and store check", func(t *testing.T) { asynqWorkerKilled(t, true) })
	t.Run("done marker only", func(t *testing.T) { asynqWorkerKilled(t, false) })
}

func asynqWorkerKilled(t *testing.T, check bool) {
	qs, ss := redistest.Start(t), redistest.Start(t)
	qrdb, srdb := qs.Client(t), ss.Client(t)
	ctx := context.Background()

	const nPayments = 300
	client := asynq.NewClientFromRedisClient(qrdb)
	rng := rand.New(rand.NewPCG(11, 11))
	var tasks []*asynq.Task
	var want int64
	for i := range nPayments {
		amount := int64(1 + rng.IntN(100))
		want += amount
		payload := fmt.Appendf(nil, `{"payment_id":"p%03d","amount":%d}`, i, amount)
		tasks = append(tasks, asynq.NewTask(payTaskType, payload), asynq.NewTask(payTaskType, payload))
	}
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	for _, task := range tasks {
		if _, err := client.Enqueue(task, asynq.Queue(payQueue), asynq.MaxRetry(25)); err != nil {
			t.Fatal(err)
		}
	}

	ev := &workerEvents{counts: map[string]int{}, commit: map[string]int{}}
	waitCommits := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for ev.get("commit") < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d commits after 30s, want %d", ev.get("commit"), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	start := time.Now()
	interrupted, aged := 0, 0
	w := startAsynqWorker(t, "worker-a", qs.Addr(), ss.Addr(), check, ev)
	for i, name := range []string{"worker-b", "worker-c"} {
		waitCommits((i + 1) * nPayments / 3)
		_ = w.cmd.Process.Kill()
		<-w.done
		active, err := qrdb.LLen(ctx, "asynq:{"+payQueue+"}:active").Result()
		if err != nil {
			t.Fatal(err)
		}
		interrupted += int(active)
		aged += ageLeases(t, qrdb)
		w = startAsynqWorker(t, name, qs.Addr(), ss.Addr(), check, ev)
	}

	// The last worker drains the queue: nothing pending, active, scheduled or retrying.
	insp := asynq.NewInspectorFromRedisClient(qrdb)
	deadline := time.Now().Add(60 * time.Second)
	var info *asynq.QueueInfo
	for {
		var err error
		info, err = insp.GetQueueInfo(payQueue)
		if err != nil {
			t.Fatal(err)
		}
		if info.Pending+info.Active+info.Scheduled+info.Retry == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not drained after 60s: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	drained := time.Since(start)
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.done

	// The ledger: each payment applied exactly once, the balance their sum.
	logIDs, err := srdb.LRange(ctx, "log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range logIDs {
		seen[id]++
	}
	doubled, missing := 0, 0
	for i := range nPayments {
		switch n := seen[fmt.Sprintf("p%03d", i)]; {
		case n == 0:
			missing++
		case n > 1:
			doubled++
		}
	}
	balance, err := srdb.Get(ctx, "balance").Int64()
	if err != nil {
		t.Fatal(err)
	}
	name := "asynq worker SIGKILLed twice mid payments, leases recovered, handler checks its store"
	if !check {
		name = "asynq worker SIGKILLed twice mid payments, leases recovered, done marker only"
	}
	t.Logf("RESULT | %s | payments=%d tasks=%d runs=%d done_marker_skips=%d busy_retries=%d errors=%d interrupted_active=%d redelivered_leases=%d caught_by_store_check=%d applied=%d doubled=%d missing=%d archived=%d drained_in=%v",
		name, nPayments, len(tasks), ev.get("out_ran"), ev.get("out_done_marker"), ev.get("out_busy"), ev.get("out_error"),
		interrupted, aged, ev.get("seen"), len(logIDs), doubled, missing, info.Archived, drained.Round(time.Millisecond))
	if !check {
		// The limit: a payment is applied twice only when a run committed it and died before
		// its done marker was written, so never more often than runs were interrupted.
		if doubled > interrupted || missing > 0 || info.Archived > 0 {
			t.Errorf("doubled %d (interrupted %d), missing %d, archived %d", doubled, interrupted, missing, info.Archived)
		}
	} else if doubled > 0 || missing > 0 || balance != want || info.Archived > 0 {
		t.Errorf("doubled %d, missing %d, balance %d want %d, archived %d", doubled, missing, balance, want, info.Archived)
	}
	if interrupted == 0 || aged == 0 {
		t.Error("no task was active when a worker died: the test proved nothing")
	}
	if ev.get("out_done_marker") == 0 {
		t.Error("no duplicate was stopped by a done marker")
	}
}
