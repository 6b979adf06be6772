package asynqlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// Keys of the balance tests: a task and an HTTP route lock the same account:{id}.
var (
	taskAccountKey = keyfunc.Join(keyfunc.Const("account"), keyfunc.JSON("account_id"))
	httpAccountKey = keyfunc.Join(keyfunc.Const("account"), keyfunc.Param("account_id"))
)

type deduction struct {
	AccountID string `json:"account_id"`
	Amount    int    `json:"amount"`
}

// deduct is a deliberately racy read-modify-write: without a lock, two deductions that
// overlap between the read and the write lose one of them.
func deduct(ctx context.Context, rdb *redis.Client, account string, amount int) error {
	bal, err := rdb.Get(ctx, "balance:"+account).Int()
	if err != nil {
		return err
	}
	select {
	case <-time.After(2 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return rdb.Set(ctx, "balance:"+account, bal-amount, 0).Err()
}

func TestBalancesTwoServers(t *testing.T) {
	const (
		accounts   = 5
		tasks      = 200
		httpCalls  = 50
		startFunds = 1000
	)
	for _, tc := range []struct {
		name  string
		lock  bool
		exact bool
	}{
		{"with middleware", true, true},
		{"without middleware loses updates", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			for a := range accounts {
				if err := e.rdb.Set(ctx, fmt.Sprintf("balance:acct-%d", a), startFunds, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var ran atomic.Int64
			mux := asynq.NewServeMux()
			if tc.lock {
				mux.Use(asynqlock.New(e.lock, taskAccountKey, asynqlock.WithWait(10*time.Second)))
			}
			mux.HandleFunc("account:deduct", func(ctx context.Context, task *asynq.Task) error {
				var d deduction
				if err := json.Unmarshal(task.Payload(), &d); err != nil {
					return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
				}
				if err := deduct(ctx, e.rdb, d.AccountID, d.Amount); err != nil {
					return err
				}
				ran.Add(1)
				return nil
			})
			e.startServer(t, serverConfig(10), mux)
			e.startServer(t, serverConfig(10), mux) // a second replica

			c := e.client(t)
			for i := range tasks {
				p, _ := json.Marshal(deduction{AccountID: fmt.Sprintf("acct-%d", i%accounts), Amount: 1})
				e.enqueue(t, c, asynq.NewTask("account:deduct", p))
			}
			// The HTTP side deducts from the same accounts under the same account:{id} lock.
			var wg sync.WaitGroup
			var httpErrs atomic.Int64
			for i := range httpCalls {
				wg.Go(func() {
					id := fmt.Sprintf("acct-%d", i%accounts)
					key, err := httpAccountKey.Key(&keyfunc.MapSource{Params: map[string]string{"account_id": id}})
					if err == nil {
						err = e.lock.Do(ctx, key, func(ctx context.Context) error { return deduct(ctx, e.rdb, id, 1) })
					}
					if err != nil {
						httpErrs.Add(1)
						t.Errorf("http deduction: %v", err)
					}
				})
			}
			wg.Wait()
			eventually(t, 30*time.Second, "every task to run", func() bool { return ran.Load() == tasks })

			want := startFunds - (tasks+httpCalls)/accounts
			exact := true
			for a := range accounts {
				got, err := e.rdb.Get(ctx, fmt.Sprintf("balance:acct-%d", a)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if got != strconv.Itoa(want) {
					exact = false
					t.Logf("acct-%d: balance %s, want %d", a, got, want)
				}
			}
			if exact != tc.exact {
				t.Fatalf("balances exact = %v, want %v", exact, tc.exact)
			}
		})
	}
}

func TestTaskAndRouteShareKey(t *testing.T) {
	task := asynq.NewTask("account:deduct", []byte(`{"account_id":"42","amount":5}`))
	taskKey, err := taskAccountKey.Key(asynqlock.NewSource(t.Context(), task))
	if err != nil {
		t.Fatal(err)
	}
	routeKey, err := httpAccountKey.Key(&keyfunc.MapSource{Params: map[string]string{"account_id": "42"}})
	if err != nil {
		t.Fatal(err)
	}
	if taskKey != routeKey || taskKey != "account:42" {
		t.Fatalf("task key %q, route key %q: want both account:42", taskKey, routeKey)
	}
}
