package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// The fenced-minimum reference is a working lock: a free key is taken with a token above the
// last one, a held key is refused, only its holder frees it, and the token survives the
// release.
func TestFencedMinimumIsALock(t *testing.T) {
	srv, err := redistest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(srv.Options())
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	keys := []string{"fm"}
	acquire := func(owner string) int64 {
		t.Helper()
		got, err := fencedMinAcquire.Run(ctx, rdb, keys, owner, 10000).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	release := func(owner string) int64 {
		t.Helper()
		got, err := fencedMinRelease.Run(ctx, rdb, keys, owner).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := acquire("a"); got != 1 {
		t.Fatalf("first acquire: token %d, want 1", got)
	}
	if got := acquire("b"); got != -1 {
		t.Fatalf("acquire of a held key: %d, want -1", got)
	}
	if got := release("b"); got != 0 {
		t.Fatalf("release by another owner: %d, want 0", got)
	}
	if got := release("a"); got != 1 {
		t.Fatalf("release by the holder: %d, want 1", got)
	}
	if got := release("a"); got != 0 {
		t.Fatalf("second release: %d, want 0", got)
	}
	if got := acquire("b"); got != 2 {
		t.Fatalf("acquire after release: token %d, want 2", got)
	}
	if ttl := rdb.PTTL(ctx, "fm").Val(); ttl <= 0 {
		t.Fatalf("lease not set: PTTL %v", ttl)
	}

	// The uncontended operation runs the pair and fails loudly on a held key.
	op := fencedMinOp(rdb, "fm2", "c")
	for range 3 {
		if err := op(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := rdb.Get(ctx, "fm2").Val(); got != " 3" {
		t.Fatalf("after three pairs the key holds %q, want \" 3\"", got)
	}
	if _, err := fencedMinAcquire.Run(ctx, rdb, []string{"fm2"}, "d", 10000).Result(); err != nil {
		t.Fatal(err)
	}
	if err := op(ctx); err == nil || !strings.Contains(err.Error(), "is held") {
		t.Fatalf("pair on a held key: %v", err)
	}
}
