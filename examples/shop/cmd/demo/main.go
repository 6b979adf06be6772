package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/examples/shop/internal/storm"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s\n\n%s", os.Args[0], usage)
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "demo: takes no arguments (got %q)\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	gin.SetMode(gin.ReleaseMode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx)
	stop()
	os.Exit(code)
}

const usage = `Runs the shop twice under the same storm of concurrent requests, without and with
locks, each time on a throwaway redis-server and database of its own, and compares the
results. It takes no flags. Exit status: 0 when the protected shop shows no anomaly, 1 when it
does, 2 when a run could not be made, 130 when interrupted.
`

func run(ctx context.Context) int {
	fmt.Println("lockguard demo: the same shop under the same storm, without and with locks.")
	var reports []*storm.Report
	for i, unprotected := range []bool{true, false} {
		r, err := once(ctx, i+1, unprotected)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "\ndemo: interrupted; the shop, its redis-server and its files are gone")
				return 130
			}
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 2
		}
		reports = append(reports, r)
	}
	fmt.Println()
	if err := storm.WriteTable(os.Stdout, reports...); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	fmt.Println()
	if n := len(reports[1].Anomalies()); n > 0 {
		fmt.Printf("FAIL: the protected shop shows %s (listed above).\n", kinds(n))
		return 1
	}
	fmt.Printf("OK: the protected shop shows no anomaly; without locks it showed %s (listed above).\n", kinds(len(reports[0].Anomalies())))
	return 0
}

// once starts a shop, runs the storm against it and stops it again.
func once(ctx context.Context, n int, unprotected bool) (r *storm.Report, err error) {
	label := "protected"
	if unprotected {
		label = "unprotected"
	}
	fmt.Printf("[%d/2] %s shop: starting (own redis-server, SQLite temp file)\n", n, label)
	in, err := shop.Start(ctx, shop.Options{
		Addr:        "127.0.0.1:0",
		Unprotected: unprotected,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		closing, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, in.Close(closing))
	}()
	progress, done := storm.ProgressLine(os.Stdout, label)
	r, err = storm.Run(ctx, storm.Config{BaseURL: in.URL, Progress: progress})
	done()
	if err != nil {
		return nil, err
	}
	fmt.Printf("      done in %.1f s, %s\n", r.Elapsed.Seconds(), kinds(len(r.Anomalies())))
	return r, nil
}

// kinds says how many kinds of anomaly a run showed.
func kinds(n int) string {
	switch n {
	case 0:
		return "no anomaly"
	case 1:
		return "1 kind of anomaly"
	}
	return fmt.Sprintf("%d kinds of anomaly", n)
}
