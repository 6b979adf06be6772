package shoptest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
