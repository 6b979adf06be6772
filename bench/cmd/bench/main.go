package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// plan holds the sizes of a run; -quick shrinks them.
type plan struct {
	quick bool

	uncRounds, uncOps int // uncontended: rounds of ops per contender

	contendedDur    time.Duration // one run of a configuration of the contended tables
	contendedRounds int           // runs of each configuration of the contended tables
	curveDur        time.Duration // the one run of an extra point of the throughput curve
	goroutines      []int         // table points
	curve           []int         // all points of the curve (100 us hold)
	holds           []time.Duration
	manyKeysDur     time.Duration // total per contender, split over manyKeysRounds
	manyKeysRounds  int
	manyKeys        int
	manyWorkers     int
	renewLocks      int
	renewLease      time.Duration
	renewPeriods    int // lease periods the locks are held, per round
	renewRounds     int
	ginDur          time.Duration // per route and load, split over ginRounds
	ginRounds       int
	ginMaxReqs      int
	ginLowConns     int
	ginHighConns    int
	pingsPerCheck   int
}

func newPlan(quick bool) plan {
	p := plan{
		quick:           quick,
		uncRounds:       20,
		uncOps:          500,
		contendedDur:    1500 * time.Millisecond,
		contendedRounds: 3,
		curveDur:        1500 * time.Millisecond,
		goroutines:      []int{8, 32},
		curve:           []int{1, 2, 4, 8, 16, 32},
		holds:           []time.Duration{100 * time.Microsecond, 0},
		manyKeysDur:     3 * time.Second,
		manyKeysRounds:  3,
		manyKeys:        10000,
		manyWorkers:     64,
		renewLocks:      10000,
		renewLease:      1500 * time.Millisecond,
		renewPeriods:    3,
		renewRounds:     3,
		ginDur:          4 * time.Second,
		ginRounds:       8,
		ginMaxReqs:      200000,
		ginLowConns:     1,
		ginHighConns:    16,
		pingsPerCheck:   300,
	}
	if quick {
		p.uncRounds, p.uncOps = 6, 150
		p.contendedDur, p.curveDur = 500*time.Millisecond, 500*time.Millisecond
		p.manyKeysDur = time.Second
		p.renewLocks = 2000
		p.ginDur, p.ginRounds = time.Second, 2
		p.pingsPerCheck = 100
	}
	return p
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == loadgenArg {
		os.Exit(loadgenMain(os.Args[2:]))
	}
	quick := flag.Bool("quick", false, "short run for development (numbers are noisier)")
	out := flag.String("out", "../docs", "directory for performance.md; plots go to its img/ subdirectory")
	only := flag.String("only", "", "run only these scenarios (comma-separated: uncontended, contended, many keys, renewal, gin) and write nothing")
	flag.Parse()
	log.SetFlags(log.Ltime)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, newPlan(*quick), *out, *only); err != nil {
		log.Printf("bench: %v", err)
		stop()
		os.Exit(1)
	}
}

// run runs the scenarios and writes the report to out; with only set, it runs just the named
// scenarios and writes nothing (their log lines are the result).
func run(ctx context.Context, p plan, out, only string) error {
	started := time.Now()
	srv, err := redistest.Launch()
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	defer func() { _ = srv.Close() }()
	log.Printf("redis-server on %s", srv.Addr())

	b, err := newBench(ctx, srv, p)
	if err != nil {
		return err
	}
	defer b.close()

	rep := &report{plan: p, started: started, settings: settings(b)}
	if rep.machine, err = b.machine(ctx); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func(context.Context, *report) error
	}{
		{"uncontended", b.uncontended},
		{"contended", b.contended},
		{"many keys", b.manyKeys},
		{"renewal", b.renewal},
		{"gin", b.gin},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if only != "" && !slices.Contains(strings.Split(only, ","), s.name) {
			continue
		}
		log.Printf("scenario: %s", s.name)
		b.pingCheck(ctx)
		if err := s.fn(ctx, rep); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	b.pingCheck(ctx)
	rep.idlePing = &b.pings
	if only != "" {
		if p := rep.findUnc(pingName); p != nil {
			log.Printf("PING interleaved with the uncontended rounds p50 %v", p.lat.Quantile(0.5))
		}
		log.Printf("PING between scenarios (back to back, process otherwise idle) p50 %v; only %q ran, nothing written", rep.idlePing.Quantile(0.5), only)
		return nil
	}
	rep.machine.loadEnd = loadAvg()
	rep.elapsed = time.Since(started)

	imgDir := filepath.Join(out, "img")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	if err := rep.plots(imgDir); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	path := filepath.Join(out, "performance.md")
	if err := os.WriteFile(path, rep.markdown(), 0o644); err != nil {
		return err
	}
	log.Printf("wrote %s and %s/*.png in %v", path, imgDir, rep.elapsed.Round(time.Second))
	return nil
}
