package dlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A fresh sharded subscription must reach the node that owns its channel's slot. go-redis
// binds a Cluster pub/sub connection to a node when the connection is made: the node of the
// first channel, or a random one when no channel is named yet. A receive loop started before
// the first SSUBSCRIBE can make the connection itself, on a random node; the subscription then
// gets MOVED and is never confirmed, and its waiter only hears of a hand-off at its next look.
// Many fresh subscribers at once, over slots of every master: each one must be confirmed.
func TestSubscriberShardedReachesSlotOwner(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	be := newRedisBackend(rdb, &config{lease: time.Minute, retry: time.Second, prefix: "lockguard"})
	defer func() { _ = be.close() }()
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := newSubscriber(rdb, true)
				defer s.close()
				ch, slot := be.channel(fmt.Sprintf("fresh-%d-%d", round, i))
				l, err := s.listen(ctx, ch, slot, "owner")
				if err != nil {
					errs <- err
					return
				}
				defer l.Close()
				select {
				case <-l.Ready():
				case <-time.After(3 * time.Second):
					errs <- fmt.Errorf("subscription to %s (slot %d) not confirmed: it went to a node that does not own the slot", ch, slot)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
	}
}
