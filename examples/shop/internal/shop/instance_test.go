package shop_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// TestStartEmbedded: with no Redis and no database given, Start runs its own redis-server
// and SQLite file, and Close removes both.
func TestStartEmbedded(t *testing.T) {
	in, err := shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if !in.Protected() {
		t.Error("the embedded default is not protected")
	}
	resp, err := http.Get(in.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(in.DBPath); !os.IsNotExist(err) {
		t.Errorf("database file %s still there after Close: %v", in.DBPath, err)
	}
	if c, err := net.DialTimeout("tcp", in.RedisAddr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("redis-server at %s still accepts connections after Close", in.RedisAddr)
	}
}

// TestStartUnprotected: -unprotected serves without locks, and says so on /healthz.
func TestStartUnprotected(t *testing.T) {
	in, err := shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0", Unprotected: true, DBPath: t.TempDir() + "/shop.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close(context.Background()) }()
	if in.Protected() {
		t.Error("Unprotected instance reports protected")
	}
}

// Failed reports the HTTP server stopping on its own, not the Close that stops it.
func TestFailedQuietAfterClose(t *testing.T) {
	in, err := shop.Start(t.Context(), shop.Options{
		Addr: "127.0.0.1:0", RedisAddr: redistest.Start(t).Addr(),
		DBPath: filepath.Join(t.TempDir(), "shop.db"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-in.Failed():
		t.Errorf("Failed() delivered %v after Close", err)
	case <-time.After(200 * time.Millisecond):
	}
}
