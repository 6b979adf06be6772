package dlock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// Tokens grow strictly across competing clients, across leases that expired without a
// release, and across the loss of every key (FLUSHALL) midway.
func TestFencingTokensStrictlyIncrease(t *testing.T) {
	srv, rdb, _ := setup(t)
	ctx := testContext(t, 60*time.Second)
	key := uniqueKey(t)
	clients := make([]*dlock.Client, 4)
	for i := range clients {
		clients[i] = newClient(t, rdb, dlock.WithRetryInterval(50*time.Millisecond))
	}
	const total = 1000
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%len(clients)]
			for {
				mu.Lock()
				n := len(tokens)
				mu.Unlock()
				if n >= total {
					return
				}
				expire := n%10 == 3 // every tenth lease runs out instead of being released
				var opts []dlock.AcquireOption
				if expire {
					opts = append(opts, dlock.WithTTL(40*time.Millisecond))
				}
				lk, err := c.Acquire(ctx, key, opts...)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				tokens = append(tokens, lk.Token()) // while holding: appends are in lock order
				if len(tokens) == total/2 {
					if err := srv.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
				mu.Unlock()
				if expire {
					<-lk.Done()
					continue
				}
				if err := lk.Release(ctx); err != nil && !isLost(err) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d after %d", i, tokens[i], tokens[i-1])
		}
	}
	t.Logf("%d strictly increasing tokens, first %d last %d", len(tokens), tokens[0], tokens[len(tokens)-1])
}

func isLost(err error) bool { return err != nil && errorsIs(err, dlock.ErrLockLost) }

// Tokens survive the deletion of the lock key and of the fence: the next token is above all.
func TestFencingAfterKeyLoss(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	var last int64
	for i := range 20 {
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if lk.Token() <= last {
			t.Fatalf("round %d: token %d after %d", i, lk.Token(), last)
		}
		last = lk.Token()
		if i%2 == 0 {
			_ = lk.Release(ctx)
			continue
		}
		// Lose everything: the lock, the queue, the fence.
		keys, _ := rdb.Keys(context.Background(), "*{"+key+"}*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		_ = lk.Release(ctx)
	}
}

// The lock hash's last token is ahead of the server clock (a promoted replica whose clock is
// behind the old master's): the next tokens must still be strictly above it and each other,
// and each is stored as the integer it is.
func TestTokensAboveLastWhenClockBehind(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lockKey := redisName(key, "lock")
	lk0, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := rdb.HSet(ctx, lockKey, "t", strconv.FormatInt(ahead, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	last := ahead
	for i := range 3 {
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if lk.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above the last %d", i, lk.Token(), last)
		}
		last = lk.Token()
		// Stored as its integer text: the next token is computed from it.
		if got := rdb.HGet(ctx, lockKey, "t").Val(); got != strconv.FormatInt(last, 10) {
			t.Fatalf("acquisition %d: stored token %q, want %d", i, got, last)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
