package dlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// ownClient is a Redis client type of the application's own (a wrapper that adds logging,
// say): a redis.UniversalClient that is neither a *redis.Client nor a *redis.ClusterClient.
type ownClient struct{ *redis.Client }

// WithReplicaAck counts the replicas of the master a *redis.Client or *redis.ClusterClient
// names: on a client of another type New panics at start-up, naming the type, instead of
// answering every acquisition ErrUnavailable (and a fail-open ginlock running every request
// unlocked). Without the option such a client works.
func TestReplicaAckNeedsKnownClient(t *testing.T) {
	_, rdb, _ := setup(t)
	own := ownClient{rdb}
	func() {
		defer func() {
			p := fmt.Sprint(recover())
			if !strings.Contains(p, "WithReplicaAck") || !strings.Contains(p, "dlock_test.ownClient") {
				t.Errorf("New(own client, WithReplicaAck) panic %q, want one naming WithReplicaAck and the type", p)
			}
		}()
		_ = dlock.New(own, dlock.WithReplicaAck(1, time.Second)).Close()
	}()

	c := dlock.New(own, dlock.WithReplicaAck(0, time.Second)) // n <= 0: off
	defer func() { _ = c.Close() }()
	ctx := testContext(t, 10*time.Second)
	lk, err := c.TryAcquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatalf("TryAcquire through a client of its own type: %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
