//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv("CHAOS_WORKER") != "" {
		os.Exit(workerProcess())
	}
	goleak.VerifyTestMain(m)
}

const (
	lease = time.Second
	retry = 100 * time.Millisecond
	// live is how long a queued waiter keeps its place after its last look, and claim the
	// lease of a lock handed to a waiter until it renews it: dlock sets both to three retry
	// intervals (see the acquire and release scripts).
	live  = 3 * retry
	claim = 3 * retry
	// resumeBound is how long after a healed fault work must have resumed: several leases,
	// well beyond what recovery takes (a lease run out on the holders' clocks, a look every
	// retry interval, a reconnect), so that a slow machine does not fail it; work stuck for
	// good does.
	resumeBound = 5 * lease
)

// runPastHeal lets the workers of a run go on until resumeBound and one lease more have
// passed since heal, then ends the run (cancel): the run covers the recovery however long the
// fault itself took, and work that resumes within resumeBound is recorded.
func runPastHeal(heal time.Time, cancel context.CancelFunc) {
	time.Sleep(time.Until(heal.Add(resumeBound + lease)))
	cancel()
}

// waitWork waits until the run has acknowledged n sections, so that a fault hits work in
// progress (holders and queued waiters), not a run still starting up.
func (b *bank) waitWork(ctx context.Context, n int) {
	b.t.Helper()
	for {
		acked := 0
		for _, s := range b.rec.Sections() {
			if s.Acked {
				acked++
			}
		}
		if acked >= n {
			return
		}
		if ctx.Err() != nil {
			b.t.Fatalf("only %d sections acknowledged before the fault, want %d", acked, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bank is one workload: a lock server to break, a store server that stays up.
type bank struct {
	t       *testing.T
	lockSrv *redistest.Server
	lockRDB *redis.Client
	resSrv  *redistest.Server
	store   *Store
	key     string
	rec     *Recorder
}

func newBank(t *testing.T, opts ...redistest.Option) *bank {
	t.Helper()
	b := &bank{t: t, lockSrv: redistest.Start(t, opts...), resSrv: redistest.Start(t), key: t.Name(), rec: NewRecorder(nil)}
	b.lockRDB = b.lockSrv.Client(t, fastFail)
	b.store = NewStore(b.resSrv.Client(t), t.Name())
	return b
}

// fastFail makes a client notice a dead or hung server quickly.
func fastFail(o *redis.Options) {
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.DialTimeout = 200 * time.Millisecond
	o.ContextTimeoutEnabled = true
}

func (b *bank) client(rdb redis.UniversalClient) *dlock.Client {
	c := dlock.New(rdb, dlock.WithLease(lease), dlock.WithRetryInterval(retry))
	b.t.Cleanup(func() { _ = c.Close() })
	return c
}

// run starts n goroutine workers on c until ctx ends; wait returns when they stopped.
func (b *bank) run(ctx context.Context, c *dlock.Client, n int, think time.Duration) (wait func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		w := &Worker{Name: fmt.Sprintf("g%d", i), Locks: c, Store: b.store, Key: b.key, Think: think, Wait: 2 * time.Second, Record: b.rec}
		go func() {
			defer wg.Done()
			w.Run(ctx)
		}()
	}
	return wg.Wait
}

// check verifies the run, logs a RESULT line for docs/reliability.md and fails on violations.
func (b *bank) check(name string, heal time.Time, extra string) Report {
	b.t.Helper()
	ctx := context.Background()
	final, err := b.store.Balance(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	log, err := b.store.WriteLog(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	r := Check(b.rec.Sections(), final, log, heal)
	b.t.Logf("RESULT | %s | %s | first_ack_after_heal=%v %s", name, r, r.FirstAckAfter.Round(time.Millisecond), extra)
	for _, v := range r.Violations {
		b.t.Errorf("violation: %s", v)
	}
	if r.Acked == 0 {
		b.t.Errorf("no work was done")
	}
	return r
}

// noKeyWithoutTTL fails if the lock server keeps a key that would never expire.
func (b *bank) noKeyWithoutTTL() {
	b.t.Helper()
	ctx := context.Background()
	keys, err := b.lockRDB.Keys(ctx, "*").Result()
	if err != nil {
		b.t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := b.lockRDB.PTTL(ctx, k).Val(); ttl < 0 {
			b.t.Errorf("key %s has no TTL", k)
		}
	}
}

// workerProc is a bank worker in another OS process.
type workerProc struct {
	cmd   *exec.Cmd
	holds chan int64    // tokens of the sections it enters
	done  chan struct{} // closed when the process has exited and its output is read
}

func (b *bank) startProcess(name string, think, dur time.Duration) *workerProc {
	b.t.Helper()
	return b.startProcessWait(name, think, dur, 2*time.Second)
}

// startProcessWait is startProcess with wait as the bound of each Acquire of the worker.
func (b *bank) startProcessWait(name string, think, dur, wait time.Duration) *workerProc {
	b.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHAOS_WORKER="+name, "CHAOS_LOCK="+b.lockSrv.Addr(), "CHAOS_RES="+b.resSrv.Addr(),
		"CHAOS_STORE="+b.t.Name(), "CHAOS_KEY="+b.key, "CHAOS_THINK="+think.String(), "CHAOS_DUR="+dur.String(),
		"CHAOS_WAIT="+wait.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	p := &workerProc{cmd: cmd, holds: make(chan int64, 1024), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = b.rec.AddJSON(out) }()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(errp)
		for sc.Scan() {
			if tok, ok := strings.CutPrefix(sc.Text(), "HOLD "); ok {
				n, _ := strconv.ParseInt(tok, 10, 64)
				select {
				case p.holds <- n:
				default:
				}
			} else {
				fmt.Fprintln(os.Stderr, name+": "+sc.Text())
			}
		}
	}()
	go func() { wg.Wait(); _ = cmd.Wait(); close(p.done) }()
	b.t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	return p
}

// workerProcess is the body of a worker process: the bank workload for CHAOS_DUR, sections on
// stdout as JSON lines, "HOLD <token>" on stderr when a section starts; CHAOS_WAIT bounds each
// Acquire (2 s when unset).
func workerProcess() int {
	think, _ := time.ParseDuration(os.Getenv("CHAOS_THINK"))
	dur, _ := time.ParseDuration(os.Getenv("CHAOS_DUR"))
	wait, err := time.ParseDuration(os.Getenv("CHAOS_WAIT"))
	if err != nil {
		wait = 2 * time.Second
	}
	lockOpts := &redis.Options{Addr: os.Getenv("CHAOS_LOCK")}
	fastFail(lockOpts)
	lockRDB := redis.NewClient(lockOpts)
	resRDB := redis.NewClient(&redis.Options{Addr: os.Getenv("CHAOS_RES")})
	defer lockRDB.Close()
	defer resRDB.Close()
	c := dlock.New(lockRDB, dlock.WithLease(lease), dlock.WithRetryInterval(retry))
	defer c.Close()
	w := &Worker{Name: os.Getenv("CHAOS_WORKER"), Locks: c, Store: NewStore(resRDB, os.Getenv("CHAOS_STORE")),
		Key: os.Getenv("CHAOS_KEY"), Think: think, Wait: wait, Record: NewRecorder(os.Stdout),
		OnHold: func(token int64) { fmt.Fprintf(os.Stderr, "HOLD %d\n", token) }}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	w.Run(ctx)
	return 0
}
