package shoptest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// Start runs a shop (without locks when unprotected) on its own Redis server and database
// file, both removed with the test. The shop is closed when the test ends; an error closing
// it fails the test.
func Start(t testing.TB, unprotected bool) *shop.Instance {
	t.Helper()
	in, err := shop.Start(t.Context(), shop.Options{
		Addr:        "127.0.0.1:0",
		RedisAddr:   redistest.Start(t).Addr(),
		DBPath:      filepath.Join(t.TempDir(), "shop.db"),
		Unprotected: unprotected,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := in.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return in
}

// HoldAccount takes the shop's lock of account id from a client of its own, as another
// replica would, for a minute; it is released, and the client closed, when the test ends.
// The shop's routes that lock the account then wait in line behind it.
func HoldAccount(t testing.TB, rdb *redis.Client, id string) *dlock.Lock {
	t.Helper()
	locks := dlock.New(rdb)
	t.Cleanup(func() { _ = locks.Close() })
	held, err := locks.Acquire(t.Context(), "account:"+id, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	return held
}
