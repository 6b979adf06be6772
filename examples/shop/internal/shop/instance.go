package shop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// DefaultAddr is the listen address of the shop command.
const DefaultAddr = "127.0.0.1:8080"

// stopWait bounds Close's wait for the requests it stopped: with their context ended, a lock
// wait, a provider call or a database call ends at once, so they answer within milliseconds.
const stopWait = 5 * time.Second

// errStopped is the cause of a request's context when Close stops it.
var errStopped = errors.New("shop: shutting down")

// Options configures Start. The zero value is the embedded default: its own redis-server
// and SQLite file, protected, on DefaultAddr.
type Options struct {
	// Addr is the listen address; "127.0.0.1:0" picks a free port. Empty: DefaultAddr.
	Addr string
	// DBPath is the SQLite file. Empty: a file in a new temporary directory, removed by Close.
	DBPath string
	// RedisAddr is a Redis to use. Empty: a redis-server child process on a free loopback
	// port, stopped by Close. Without DBPath it is throwaway (no persistence); with DBPath it
	// keeps an append-only file in the directory DBPath + ".redis", so that what the shop
	// accepted and Redis holds (queued refunds, stored answers for replay, their done
	// markers) survives a restart on the same database, as the ledger does.
	RedisAddr string
	// Unprotected serves the same routes without the lock middlewares.
	Unprotected bool
	// Provider simulates the payment provider. Zero: DefaultProvider.
	Provider Provider
	// Logger receives errors. Nil: discarded.
	Logger *slog.Logger
}

// Instance is a running shop: HTTP server, refund worker, and what Start started for them.
type Instance struct {
	// URL is the base URL, e.g. "http://127.0.0.1:8080".
	URL string
	// RedisAddr and DBPath are what the instance uses, given or started.
	RedisAddr, DBPath string

	app     *App
	srv     *http.Server
	stop    context.CancelCauseFunc // ends the context of every request
	served  chan error
	store   *Store
	rdb     *redis.Client
	locks   *dlock.Client
	redis   *redistest.Server // nil when Options.RedisAddr was given; persistent with DBPath
	tempDir string            // "" when Options.DBPath was given
	log     *slog.Logger
}

// Start starts a shop. On error, everything it started is stopped again. The caller must
// Close the instance.
func Start(ctx context.Context, o Options) (in *Instance, err error) {
	in = &Instance{served: make(chan error, 1)}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	in.log = o.Logger
	defer func() {
		if err != nil {
			_ = in.Close(context.Background())
			in = nil
		}
	}()

	in.RedisAddr = o.RedisAddr
	if in.RedisAddr == "" {
		var opts []redistest.Option
		if o.DBPath != "" {
			dir := o.DBPath + ".redis"
			if err = os.MkdirAll(dir, 0o700); err != nil {
				return in, fmt.Errorf("shop: redis data directory: %w", err)
			}
			opts = append(opts, redistest.WithArgs("--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec"))
		}
		if in.redis, err = redistest.Launch(opts...); err != nil {
			return in, fmt.Errorf("shop: start redis-server: %w", err)
		}
		in.RedisAddr = in.redis.Addr()
	}
	// The settings docs/dlock.md asks for: a stalled Redis fails a call in about half a
	// second (a 503), rather than holding the request for go-redis's default 5 s per try.
	in.rdb = redis.NewClient(&redis.Options{Addr: in.RedisAddr, PoolSize: 64,
		ContextTimeoutEnabled: true, ReadTimeout: 500 * time.Millisecond})
	if err = in.rdb.Ping(ctx).Err(); err != nil {
		return in, fmt.Errorf("shop: redis at %s: %w", in.RedisAddr, err)
	}
	// Locks, stored answers and the refund queue all live in this Redis: one that evicts
	// keys when full would drop any of them without a word. Refuse it; go on with a warning
	// when its settings cannot be read.
	in.locks = dlock.New(in.rdb, dlock.WithLogger(o.Logger))
	if err = in.locks.Check(ctx); errors.Is(err, dlock.ErrUnsafeStore) {
		return in, fmt.Errorf("shop: redis at %s: %w", in.RedisAddr, err)
	} else if err != nil {
		o.Logger.Warn("shop: the Redis eviction settings could not be checked", "err", err)
		err = nil
	}

	in.DBPath = o.DBPath
	if in.DBPath == "" {
		if in.tempDir, err = os.MkdirTemp("", "lockguard-shop-"); err != nil {
			return in, fmt.Errorf("shop: %w", err)
		}
		in.DBPath = filepath.Join(in.tempDir, "shop.db")
	}
	if in.store, err = OpenStore(ctx, in.DBPath); err != nil {
		return in, err
	}

	var prot Protection
	if !o.Unprotected {
		prot = Protect(in.locks, in.store, o.Logger)
	}
	in.app = NewApp(Config{Store: in.store, Redis: in.rdb, Protection: prot, Provider: o.Provider, Logger: o.Logger})
	if err = in.app.StartWorker(); err != nil {
		return in, fmt.Errorf("shop: start worker: %w", err)
	}

	addr := o.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return in, fmt.Errorf("shop: %w", err)
	}
	in.URL = "http://" + ln.Addr().String()
	// ReadTimeout bounds a body sent slowly. Routes that queue for a lock read their body
	// first (readBodyFirst), before the wait: once the body is read, net/http clears the read
	// deadline itself, so a long wait in the queue is not cut by it.
	// Requests get a context Close can end (BaseContext), for the ones still running when
	// its own context ends.
	requests, stop := context.WithCancelCause(context.Background())
	in.stop = stop
	in.srv = &http.Server{Handler: in.app.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return requests }}
	go func() {
		if err := in.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			in.served <- err
		}
	}()
	return in, nil
}

// shutdownHTTP stops the HTTP server. Requests queued for a lock are stopped at once (they
// have done nothing yet; they answer 503 unavailable); running ones are waited for until ctx
// ends. Requests still running then are stopped too (they answer 503 unavailable and write
// nothing, or 409 lock_lost if their write was already refused) and waited for (stopWait),
// so that Close never closes the lock client, Redis or the database under a handler: its
// release would fail, leaving its lock held until the lease runs out, and its write would
// fail half-way. Only requests still running after that are an error.
func (in *Instance) shutdownHTTP(ctx context.Context) error {
	if in.app != nil {
		if n := in.app.StopWaiting(); n > 0 {
			in.log.Warn("shop: shutting down: requests queued for a lock were stopped; they answered 503 unavailable", "requests", n)
		}
	}
	err := in.srv.Shutdown(ctx)
	if err == nil {
		return nil
	}
	in.stop(errStopped)
	wait, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	// A second Shutdown waits again until every connection is idle, which is when its
	// handler has returned; the listener is closed already.
	if werr := in.srv.Shutdown(wait); werr != nil {
		return fmt.Errorf("shop: requests still running %v after they were stopped: %w", stopWait, werr)
	}
	in.log.Warn("shop: shutting down: requests still running at the end of the shutdown wait were stopped; they answered 503 unavailable and wrote nothing", "wait", err)
	return nil
}

// Protected reports whether the instance runs with locks.
func (in *Instance) Protected() bool { return in.app.Protected() }

// Failed returns a channel that receives the HTTP server's error if it stops serving on
// its own (not after Close).
func (in *Instance) Failed() <-chan error { return in.served }

// Close shuts the instance down: it stops accepting requests, stops the requests queued for
// a lock at once (they have done nothing yet: 503 unavailable, Retry-After: 1), and waits
// for running ones until ctx ends. It then stops those still running (their context ends:
// they answer 503 unavailable, write nothing and release their locks) and waits for them up
// to 5 s more; stopped requests are logged, not returned as errors. Only then does it stop
// the worker (up to 5 s for running tasks) and close the lock client, Redis client,
// database, the redis-server it started and its temporary directory. It returns the errors
// joined: requests still running after they were stopped, and failures to close.
func (in *Instance) Close(ctx context.Context) error {
	var errs []error
	if in.srv != nil {
		errs = append(errs, in.shutdownHTTP(ctx))
	}
	if in.stop != nil {
		in.stop(errStopped)
	}
	if in.app != nil {
		errs = append(errs, in.app.Close())
	}
	if in.locks != nil {
		errs = append(errs, in.locks.Close())
	}
	if in.rdb != nil {
		errs = append(errs, in.rdb.Close())
	}
	if in.store != nil {
		errs = append(errs, in.store.Close())
	}
	if in.redis != nil {
		if in.tempDir == "" {
			// A persistent Redis (beside the database) is shut down with SIGTERM, which
			// writes out its append-only file: the last second of writes (a task handed
			// back to the queue by the worker's shutdown) is not lost.
			errs = append(errs, in.redis.Stop())
		}
		errs = append(errs, in.redis.Close())
	}
	if in.tempDir != "" {
		errs = append(errs, os.RemoveAll(in.tempDir))
	}
	return errors.Join(errs...)
}
