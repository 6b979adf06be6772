package dlock

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// Every key and the channel of a lock hash to one slot, and hashSlot agrees with Redis's
// CLUSTER KEYSLOT, for user keys and prefixes full of braces, escapes and odd bytes; and such
// locks work end to end on a real Cluster (try, refresh, a waiter handed the lock, complete).
func TestClusterTrickyKeysOneSlot(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	keys := []string{"{", "}", "{}", "}{", "{{}}", "{a}", "a{b}c", "{a}{b}", "x{}y{z}", "%7B", "%", "%%7D{",
		"\\{x\\}", "{\\}", strings.Repeat("{", MaxKeyLen), strings.Repeat("}", MaxKeyLen),
		strings.Repeat("{}", MaxKeyLen/2), strings.Repeat("ab{", MaxKeyLen/3), "\x00{\xff}", "é{ü}", " ", ":", "a:{b}:lock"}
	r := rand.New(rand.NewPCG(1, 2))
	alpha := []byte("{}%ab:\\ \x00\xff")
	for range 200 {
		n := 1 + r.IntN(40)
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
		keys = append(keys, string(b))
	}
	node := cl.Masters[0].Client(t)
	for _, prefix := range []string{DefaultPrefix, "{", "}", "{}", "a{b}", "p}{", ""} {
		c := New(rdb, WithPrefix(prefix), WithLease(2*time.Second))
		b := c.be.(*redisBackend)
		for _, k := range keys {
			ks, ch := b.keys(k)
			names := append(append([]string{}, ks...), ch)
			want := -1
			for _, n := range names {
				s, err := node.ClusterKeySlot(ctx, n).Result()
				if err != nil {
					t.Fatal(err)
				}
				if want < 0 {
					want = int(s)
				}
				if int(s) != want {
					t.Errorf("prefix %q key %q: %q in slot %d, others in %d", prefix, k, n, s, want)
				}
				if hashSlot(n) != int(s) {
					t.Errorf("prefix %q key %q: hashSlot(%q) = %d, Redis %d", prefix, k, n, hashSlot(n), s)
				}
			}
			if _, s := b.channel(k); s != want {
				t.Errorf("prefix %q key %q: channel slot %d, Redis %d", prefix, k, s, want)
			}
		}
		// End to end for a sample of keys.
		for i, k := range keys[:30] {
			lk, err := c.TryAcquire(ctx, k)
			if err != nil {
				t.Fatalf("prefix %q key %d %q: TryAcquire: %v", prefix, i, k, err)
			}
			if err := lk.Refresh(ctx, 2*time.Second); err != nil {
				t.Fatalf("prefix %q key %q: Refresh: %v", prefix, k, err)
			}
			got := make(chan error, 1)
			go func() {
				l2, err := c.Acquire(ctx, k)
				if err == nil {
					err = l2.Complete(ctx, []byte("x"), time.Second)
				}
				got <- err
			}()
			// In line: the release hands it the lock.
			ks, _ := b.keys(k)
			if !waitFor(10*time.Second, func() bool { return rdb.ZCard(ctx, ks[1]).Val() == 1 }) {
				t.Fatalf("prefix %q key %q: the waiter did not queue", prefix, k)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("prefix %q key %q: Release: %v", prefix, k, err)
			}
			if err := <-got; err != nil {
				t.Fatalf("prefix %q key %q: waiter: %v", prefix, k, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
