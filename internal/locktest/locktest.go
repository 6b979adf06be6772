package locktest

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Holds returns the owner of the lock hash at lockKey ("" when released or absent) and its
// number of holds.
func Holds(t testing.TB, rdb redis.Cmdable, lockKey string) (owner string, holds int) {
	t.Helper()
	v, err := rdb.HMGet(context.Background(), lockKey, "o", "h").Result()
	if err != nil {
		t.Fatalf("lock %s: %v", lockKey, err)
	}
	owner, _ = v[0].(string)
	if h, ok := v[1].(string); ok {
		if holds, err = strconv.Atoi(h); err != nil {
			t.Fatalf("lock %s: hold count %q: %v", lockKey, h, err)
		}
	}
	return owner, holds
}

// Owner returns the owner of the lock hash at lockKey: "" when released or absent.
func Owner(ctx context.Context, rdb redis.Cmdable, lockKey string) (string, error) {
	owner, err := rdb.HGet(ctx, lockKey, "o").Result()
	if err == redis.Nil {
		return "", nil
	}
	return owner, err
}

// Held returns the keys of the lock hashes in rdb that have an owner. A released lock's hash
// stays, without owner, until its lease would have ended: that is not a held lock.
func Held(t testing.TB, rdb redis.Cmdable) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*}:lock").Result()
	if err != nil {
		t.Fatalf("lock keys: %v", err)
	}
	var held []string
	for _, k := range keys {
		owner, err := Owner(context.Background(), rdb, k)
		if err != nil {
			t.Fatalf("lock %s: %v", k, err)
		}
		if owner != "" {
			held = append(held, k)
		}
	}
	return held
}
