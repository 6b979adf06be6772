package redistest_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A sentinel started by the harness runs in sentinel mode on its own port and monitors the
// master it was given.
func TestStartSentinel(t *testing.T) {
	master := redistest.Start(t)
	s := redistest.StartSentinel(t, master, "lg")
	if s.Port() == master.Port() {
		t.Fatal("sentinel on the master's port")
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer func() { _ = sc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := sc.GetMasterAddrByName(ctx, "lg").Result()
	if err != nil {
		t.Fatal(err)
	}
	if addr[1] != strconv.Itoa(master.Port()) {
		t.Fatalf("sentinel monitors %v, want port %d", addr, master.Port())
	}
}
