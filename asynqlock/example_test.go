package asynqlock_test

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// The server configuration lines asynqlock needs, and the middleware around one handler:
// every account:deduct task locks account:{account_id}, the same key an HTTP route derives
// with keyfunc.Join(keyfunc.Const("account"), keyfunc.Param("account_id")) as long as both
// write the id alike (add .Integer() to both parts when "042" and 42 must be one account).
// Wrap puts it on
// the task types whose payload has the field; New, for mux.Use, would put it on every type,
// and a task without account_id would be archived as invalid.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locks := dlock.New(rdb)
	defer locks.Close()

	accountKey := keyfunc.Join(keyfunc.Const("account"), keyfunc.JSON("account_id"))

	deduct := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		lk, _ := asynqlock.FromContext(ctx)
		_ = lk.Token() // a fencing token for the write; ctx ends if the lock is lost
		return nil
	})
	mux := asynq.NewServeMux()
	mux.Handle("account:deduct", asynqlock.Wrap(deduct, locks, accountKey, asynqlock.WithRetryIn(3*time.Second)))

	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
		IsFailure:      asynqlock.IsFailure,       // a busy task does not use up a retry
		RetryDelayFunc: asynqlock.RetryDelay(nil), // it comes back after RetryIn; others as before
	})
	_ = srv.Run(mux)
}

// Exactly-once effect for a payment task: duplicates with the same payment_id (a client that
// enqueued twice, a redelivery) are acknowledged without running once one succeeded.
func ExampleWithDoneMarker() {
	locks := dlock.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	defer locks.Close()

	capture := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return nil })
	payKey := keyfunc.Join(keyfunc.Const("payment"), keyfunc.JSON("payment_id"))

	mux := asynq.NewServeMux()
	mux.Handle("payment:capture", asynqlock.Wrap(capture, locks, payKey,
		asynqlock.WithDoneMarker(7*24*time.Hour), // longer than any retry or redelivery
		asynqlock.WithWait(10*time.Second),       // a duplicate waits, then sees the marker
	))
}

// A periodic job that every replica schedules runs once per minute: the first task of each
// minute runs, its duplicates from the other replicas are acknowledged or revoked.
func ExampleOncePerSlot() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locks := dlock.New(rdb)
	defer locks.Close()

	// On every replica:
	scheduler := asynq.NewSchedulerFromRedisClient(rdb, nil)
	_, _ = scheduler.Register("* * * * *", asynq.NewTask("report:minute", nil), asynq.MaxRetry(0))

	mux := asynq.NewServeMux()
	mux.Handle("report:minute", asynqlock.Wrap(
		asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			minute, _ := asynqlock.SlotStart(ctx) // the minute this run is for
			_ = minute
			return nil
		}),
		locks, keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType)), asynqlock.OncePerSlot(time.Minute)))
}

// Enqueue from an HTTP handler with the request's trace context in the task headers: the
// task's asynqlock.lock span joins the request's trace.
func ExampleNewTask() {
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "localhost:6379"})
	http.HandleFunc("POST /accounts/{id}/deduct", func(w http.ResponseWriter, r *http.Request) {
		payload, _ := json.Marshal(map[string]any{"account_id": r.PathValue("id"), "amount": 5})
		if _, err := client.EnqueueContext(r.Context(), asynqlock.NewTask(r.Context(), "account:deduct", payload)); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
}
