package storm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// A protected shop whose worker credits one order of each account twice and never refunds
// another (the order stays "paid" after its 202) balances out in the totals; the storm must
// still count it, per order.
func TestStormCatchesMisappliedRefunds(t *testing.T) {
	rdb, store, locks := shopParts(t)
	prot := shop.Protect(locks, store, nil)

	// Inside both locks: per account, the first order refunded is credited twice, the
	// second is acknowledged without being refunded.
	var mu sync.Mutex
	seen := map[string][]string{}
	sabotage := func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			var p shop.RefundPayload
			if err := json.Unmarshal(task.Payload(), &p); err != nil {
				return err
			}
			mu.Lock()
			seen[p.AccountID] = append(seen[p.AccountID], p.OrderID)
			nth := len(seen[p.AccountID])
			mu.Unlock()
			switch nth {
			case 1:
				if err := next.ProcessTask(ctx, task); err != nil {
					return err
				}
				snap, err := store.ReadBalance(ctx, p.AccountID, 0)
				if err != nil {
					return err
				}
				_, err = store.Apply(ctx, snap, shop.Entry{AccountID: p.AccountID, OrderID: p.OrderID, Kind: shop.KindRefund, Amount: p.Amount}, "")
				return err
			case 2:
				return nil // never refunded
			}
			return next.ProcessTask(ctx, task)
		})
	}
	real := prot.Refund
	prot.Refund = func(h asynq.Handler) asynq.Handler { return real(sabotage(h)) }

	hs := httptest.NewServer(startApp(t, rdb, store, prot))
	t.Cleanup(hs.Close)

	r := stormAt(t, hs.URL)

	// What the shop actually did, per order.
	stuck := 0
	for acct, orders := range seen {
		l, err := store.Ledger(context.Background(), acct)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, e := range l {
			if e.Kind == shop.KindRefund {
				per[e.OrderID]++
			}
		}
		for _, o := range orders {
			got, _ := store.Order(context.Background(), o)
			t.Logf("account %s order %s: %d refund entries, status %s", acct, o, per[o], got.Status)
			if got.Status == shop.StatusPaid {
				stuck++
			}
		}
	}
	if stuck == 0 {
		t.Fatal("sabotage did not take effect")
	}
	if r.Clean() {
		t.Errorf("the storm reports 0 anomalies, yet %d accepted refunds were never applied and as many orders were credited twice", stuck)
	}
}

// A shop that answers every pay of the storm with 409 takes no payment at all; 409 is an
// accepted answer to a duplicate pay, so the storm must see that no pay went through.
func TestStormCatchesAShopThatNeverPays(t *testing.T) {
	rdb, store, locks := shopParts(t)
	h := startApp(t, rdb, store, shop.Protect(locks, store, nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/pay") && strings.HasPrefix(r.Header.Get("Idempotency-Key"), "pay-") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"already_paid"}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)

	r := stormAt(t, hs.URL)
	if r.OrdersPaid != 0 {
		t.Fatal("the order was paid")
	}
	if r.Clean() {
		t.Errorf("no pay of the storm succeeded (orders paid %d, charges %d), yet the storm reports 0 anomalies: the demo would print OK", r.OrdersPaid, r.Charges)
	}
}

// A protected shop whose answers to the pay retries are wrong: a 500 for each, or a fresh
// 409 already_paid for the key that paid instead of its stored 200 (a replay store that lost
// its records). The charges and balances are right either way; the storm must still count it.
func TestStormCatchesBrokenPayRetries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry func(h http.Handler, w http.ResponseWriter, r *http.Request)
	}{
		{"500", func(_ http.Handler, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
		}},
		{"not replayed", func(h http.Handler, w http.ResponseWriter, r *http.Request) {
			r.Header.Set("Idempotency-Key", "forgotten-"+r.Header.Get("Idempotency-Key"))
			h.ServeHTTP(w, r)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, store, locks := shopParts(t)
			h := startApp(t, rdb, store, shop.Protect(locks, store, nil))
			perKey := small.Pays / small.PayKeys // the burst's requests per key; the next is the retry
			var mu sync.Mutex
			seen := map[string]int{}
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := r.Header.Get("Idempotency-Key")
				if strings.HasSuffix(r.URL.Path, "/pay") && strings.HasPrefix(key, "pay-") {
					mu.Lock()
					seen[key]++
					retry := seen[key] > perKey
					mu.Unlock()
					if retry {
						tc.retry(h, w, r)
						return
					}
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(hs.Close)

			r := stormAt(t, hs.URL)
			if r.Charges != 1 || r.OrdersPaid != 1 {
				t.Fatalf("precondition: one charge for the paid order, got %d charges, %d paid", r.Charges, r.OrdersPaid)
			}
			if r.Clean() {
				t.Errorf("the pay retries were answered %v (%d replayed 200s), yet the storm reports 0 anomalies", r.RetryAnswers, r.RetryReplayed)
			}
		})
	}
}

// startApp starts a shop app with its worker on the parts, stopped when the test ends, and
// returns its handler.
func startApp(t *testing.T, rdb *redis.Client, store *shop.Store, prot shop.Protection) http.Handler {
	t.Helper()
	app := shop.NewApp(shop.Config{Store: store, Redis: rdb, Protection: prot})
	if err := app.StartWorker(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	return app.Handler()
}

// shopParts starts a Redis and opens a database and a lock client on it, for a shop a test
// assembles itself; all are closed when the test ends.
func shopParts(t *testing.T) (*redis.Client, *shop.Store, *dlock.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	store, err := shop.OpenStore(t.Context(), filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	locks := dlock.New(rdb)
	t.Cleanup(func() { _ = locks.Close() })
	return rdb, store, locks
}
