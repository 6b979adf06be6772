package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// exampleRedis starts a throwaway Redis for the examples; an application passes its own client.
func exampleRedis() (*redis.Client, func()) {
	srv, err := redistest.Launch()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(srv.Options())
	return rdb, func() { _ = rdb.Close(); _ = srv.Close() }
}

func Example() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()

	ctx := context.Background()
	lock, err := locks.Acquire(ctx, "account:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// Work under the lock with a context that ends if the lock is lost.
	work := dlock.WithLock(ctx, lock)
	fmt.Println("held:", work.Err() == nil, "holds:", lock.HoldCount())
	// Output: held: true holds: 1
}

// Re-entry travels in the context: a nested Acquire of the same key with the lock's context
// adds a hold instead of waiting for itself.
func Example_reentrancy() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	outer, _ := locks.Acquire(ctx, "account:42")
	ctx = dlock.WithLock(ctx, outer)

	inner, _ := locks.Acquire(ctx, "account:42") // same lease, one more hold
	fmt.Println("holds:", outer.HoldCount(), "same token:", inner.Token() == outer.Token())

	_ = inner.Release(ctx) // the key stays locked
	fmt.Println("holds after inner release:", outer.HoldCount())
	_ = outer.Release(ctx) // now it is free
	fmt.Println("holds after outer release:", outer.HoldCount())
	// Output:
	// holds: 2 same token: true
	// holds after inner release: 1
	// holds after outer release: 0
}

func ExampleClient_TryAcquire() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	first, _ := locks.TryAcquire(ctx, "order:7")
	_, err := locks.TryAcquire(ctx, "order:7")
	fmt.Println(errors.Is(err, dlock.ErrNotObtained))
	_ = first.Release(ctx)
	// Output: true
}

func ExampleClient_Do() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()

	err := locks.Do(context.Background(), "account:42", func(ctx context.Context) error {
		// ctx is cancelled with cause dlock.ErrLockLost if the lease is lost.
		fmt.Println("deducting under the lock")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// deducting under the lock
	// err: <nil>
}

// Acquire waits until its context ends; the error then matches both ErrNotObtained and the
// context's error.
func ExampleClient_Acquire_timeout() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	held, _ := locks.Acquire(ctx, "report")
	defer held.Release(ctx)

	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := locks.Acquire(wctx, "report")
	fmt.Println(errors.Is(err, dlock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

// WithMaxWait bounds the wait for a busy lock without a context of its own: a free lock is
// taken however short the bound, and a busy one fails as at a context deadline.
func ExampleWithMaxWait() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	lk, err := locks.Acquire(ctx, "invoice:7", dlock.WithMaxWait(time.Microsecond))
	fmt.Println("free lock:", err)
	_, err = locks.Acquire(ctx, "invoice:7", dlock.WithMaxWait(50*time.Millisecond))
	fmt.Println("busy lock:", errors.Is(err, dlock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	_ = lk.Release(ctx)
	// Output:
	// free lock: <nil>
	// busy lock: true true
}

// Complete records that the work under a key is done, atomically with the release; a later
// acquisition with SkipCompleted gets the record instead of the lock.
func ExampleLock_Complete() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	lock, _ := locks.Acquire(ctx, "payment:991", dlock.SkipCompleted())
	_ = lock.Complete(ctx, []byte("charged 25.00"), 24*time.Hour)

	_, err := locks.Acquire(ctx, "payment:991", dlock.SkipCompleted())
	var done *dlock.CompletedError
	if errors.As(err, &done) {
		fmt.Println("already done:", string(done.Record))
	}
	// Output: already done: charged 25.00
}

// Fencing tokens let the protected resource reject a holder whose lease ran out.
func ExampleLock_Token() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	a, _ := locks.Acquire(ctx, "ledger")
	ta := a.Token()
	_ = a.Release(ctx)
	b, _ := locks.Acquire(ctx, "ledger")
	defer b.Release(ctx)
	// A store accepting writes only with a token above the last one it saw would now
	// reject a late write carrying ta.
	fmt.Println(b.Token() > ta)
	// Output: true
}

// Spans, logs and error texts name a lock by the hash of its key, never the key itself:
// compute it to find one lock's events.
func ExampleKeyHash() {
	fmt.Println(dlock.KeyHash("account:42"))
	// Output: 38dbcc9b3c91186a
}

// Check at start-up that Redis keeps locks until their lease ends: a server that evicts keys
// when full may drop a held lock and let a second holder in.
func ExampleClient_Check() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	err := locks.Check(ctx)
	fmt.Println("default server:", err)

	// As a cache server is often set up: evict when 100 MB are used.
	rdb.ConfigSet(ctx, "maxmemory", "100mb")
	rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru")
	err = locks.Check(ctx)
	switch {
	case errors.Is(err, dlock.ErrUnsafeStore):
		fmt.Println("unsafe: refuse to start, or use another Redis")
	case err != nil:
		fmt.Println("could not check:", err)
	}
	// Output:
	// default server: <nil>
	// unsafe: refuse to start, or use another Redis
}
