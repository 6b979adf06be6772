package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
)

// shutdownWait is how long SIGINT or SIGTERM lets running requests finish before they are
// stopped (Instance.Close); requests queued for a lock are stopped at once.
const shutdownWait = 10 * time.Second

// repeatWindow is how long after the first SIGINT or SIGTERM another is taken for the same
// one, delivered twice, rather than a second Ctrl-C that kills the shop.
const repeatWindow = time.Second

func main() {
	if err := run(); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "shop:") { // the package's errors name it already
			msg = "shop: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

func run() error {
	var o shop.Options
	flag.StringVar(&o.Addr, "addr", shop.DefaultAddr, "listen address")
	flag.StringVar(&o.DBPath, "db", "", "SQLite database file (default: a temporary file, removed on exit); without REDIS_ADDR, the own redis-server persists to <db>.redis")
	flag.BoolVar(&o.Unprotected, "unprotected", false, "serve the same routes without the lock middlewares")
	flag.Parse()
	o.RedisAddr = os.Getenv("REDIS_ADDR")
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gin.SetMode(gin.ReleaseMode)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	in, err := shop.Start(ctx, o)
	if err != nil {
		return err
	}
	mode := "protected"
	if !in.Protected() {
		mode = "UNPROTECTED"
	}
	redisNote := in.RedisAddr
	switch {
	case o.RedisAddr == "" && o.DBPath != "":
		redisNote += " (own redis-server, data in " + o.DBPath + ".redis)"
	case o.RedisAddr == "":
		redisNote += " (own redis-server)"
	}
	fmt.Printf("shop: %s on %s\n  redis  %s\n  db     %s\nCtrl-C to stop.\n", mode, in.URL, redisNote, in.DBPath)

	select {
	case <-ctx.Done():
	case err = <-in.Failed():
	}
	// One Ctrl-C can arrive twice (GNU timeout and a terminal's job control signal the
	// process group too): a repeat within repeatWindow is the same one. A later one kills
	// the shop at once (the signal's default action).
	repeats := make(chan os.Signal, 1)
	signal.Notify(repeats, os.Interrupt, syscall.SIGTERM) // before stop: no gap without a handler
	stop()
	time.AfterFunc(repeatWindow, func() { signal.Stop(repeats) })
	shutdown, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	fmt.Printf("shop: shutting down: requests queued for a lock answer 503, running ones get up to %v (Ctrl-C again to kill)\n", shutdownWait)
	if cerr := in.Close(shutdown); err == nil {
		err = cerr
	}
	if err == nil {
		fmt.Println("shop: stopped")
	}
	return err
}
