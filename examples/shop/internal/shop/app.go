package shop

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Config configures an App.
type Config struct {
	// Store is the ledger database. Required.
	Store *Store
	// Redis holds the task queue (and, protected, the locks and idempotency records). Required.
	Redis redis.UniversalClient
	// Protection is the set of lock middlewares; the zero value serves unprotected.
	Protection Protection
	// Provider simulates the payment provider. Zero: DefaultProvider.
	Provider Provider
	// Logger receives errors and worker events. Nil: discarded.
	Logger *slog.Logger
	// WorkerConcurrency is how many refund tasks run at once. Zero: 8.
	WorkerConcurrency int
}

// App is the shop: its HTTP handler and its refund worker. It does not own Store or Redis.
type App struct {
	store     *Store
	rdb       redis.UniversalClient
	provider  Provider
	protected bool
	log       *slog.Logger
	engine    *gin.Engine
	queue     *asynq.Client
	inspector *asynq.Inspector
	worker    *asynq.Server
	mux       *asynq.ServeMux
	waits     *lockWaits // requests waiting for their locks, stopped by StopWaiting
}

// NewApp builds the shop's routes and worker; StartWorker starts the worker, Close stops it.
func NewApp(cfg Config) *App {
	a := &App{
		store:     cfg.Store,
		rdb:       cfg.Redis,
		provider:  cfg.Provider,
		protected: cfg.Protection.enabled(),
		log:       cfg.Logger,
		queue:     asynq.NewClientFromRedisClient(cfg.Redis),
		inspector: asynq.NewInspectorFromRedisClient(cfg.Redis),
		waits:     newLockWaits(),
	}
	if a.provider == (Provider{}) {
		a.provider = DefaultProvider
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.engine = a.routes(cfg.Protection)

	a.mux = asynq.NewServeMux()
	if cfg.Protection.Refund != nil {
		a.mux.Use(cfg.Protection.Refund)
	}
	a.mux.HandleFunc(TaskRefund, a.handleRefund)
	n := cfg.WorkerConcurrency
	if n <= 0 {
		n = 8
	}
	a.worker = asynq.NewServerFromRedisClient(cfg.Redis, asynq.Config{
		Concurrency:    n,
		Queues:         map[string]int{refundQueue: 1},
		IsFailure:      cfg.Protection.IsFailure,
		RetryDelayFunc: cfg.Protection.RetryDelay,
		// Short intervals so a refund runs within milliseconds of its request and a task
		// that found its lock busy is back quickly; asynq's defaults (1 s, 5 s) suit
		// production queues, not a demo that waits for its queue to drain.
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		Logger:                   asynqLogger{a.log},
		LogLevel:                 asynq.WarnLevel,
	})
	return a
}

// routes wires the HTTP contract; p's middlewares sit in front of the handlers they guard.
func (a *App) routes(p Protection) *gin.Engine {
	r := gin.New()
	r.Use(gin.Recovery())
	// Wrong paths and methods get the contract's JSON errors, not Gin's plain text.
	r.HandleMethodNotAllowed = true
	r.NoRoute(func(c *gin.Context) { fail(c, http.StatusNotFound, "not_found") })
	r.NoMethod(func(c *gin.Context) { fail(c, http.StatusMethodNotAllowed, "method_not_allowed") })
	r.GET("/", a.page)
	r.GET("/healthz", a.health)
	api := r.Group("/api")
	api.POST("/accounts", a.createAccount)
	api.GET("/accounts/:id", a.getAccount)
	api.GET("/accounts/:id/ledger", a.getLedger)
	api.POST("/accounts/:id/withdraw", append([]gin.HandlerFunc{readBodyFirst}, a.waits.guard(p.Withdraw, a.withdraw)...)...)
	api.POST("/orders", a.createOrder)
	api.GET("/orders/:id", a.getOrder)
	// Pay takes no body, but ginlock reads one for the fingerprint: capped here as on the
	// other routes, so both modes refuse the same bodies alike.
	api.POST("/orders/:id/pay", append([]gin.HandlerFunc{readBodyFirst, requireIdempotencyKey}, a.waits.guard(p.Pay, a.pay)...)...)
	api.POST("/orders/:id/refund", a.refund)
	api.GET("/queue", a.queueStats)
	return r
}

// Handler returns the HTTP handler of the shop.
func (a *App) Handler() http.Handler { return a.engine }

// Protected reports whether the shop runs with locks.
func (a *App) Protected() bool { return a.protected }

// StopWaiting ends, at once, the wait of every request queued for a lock, and of every
// request that queues later: they answer 503 unavailable with Retry-After: 1 and write
// nothing. Requests that hold their locks run on. A shutdown calls it first, so that
// requests that have done nothing yet do not hold it up. It returns how many it stopped.
func (a *App) StopWaiting() int { return a.waits.stop() }

// StartWorker starts processing refund tasks.
func (a *App) StartWorker() error { return a.worker.Start(a.mux) }

// Close stops the worker, waiting up to 5 s for running tasks. The asynq client and
// inspector share Redis and hold nothing of their own to close; Store and Redis are the
// caller's.
func (a *App) Close() error {
	a.worker.Shutdown()
	return nil
}
