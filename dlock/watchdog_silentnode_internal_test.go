package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A lock handed off to a waiter holds only the releaser's claim lease (3 s here) until its
// watchdog confirms it, a third into the claim lease. On a Cluster with one master silent
// (paused, partitioned: not refusing, just not answering), that confirmation must not wait
// for the silent master: not when it shares a batch with a renewal sent there (the answers
// of the healthy masters used to be applied only once every master's call was over), and
// not when it comes due while an earlier batch to the silent master is still out (the
// watchdog loop used to wait for that batch). Either way the lock on the healthy master,
// whose master answers at once, was lost when its claim lease ran out.

// TestSilentNodeSameBatchConfirmsHandOff: the confirmation and a renewal to the silent
// master in one batch.
func TestSilentNodeSameBatchConfirmsHandOff(t *testing.T) {
	testSilentNodeHandOff(t, true)
}

// TestSilentNodeInFlightConfirmsHandOff: the confirmation comes due while a batch to the
// silent master is in flight.
func TestSilentNodeInFlightConfirmsHandOff(t *testing.T) {
	testSilentNodeHandOff(t, false)
}

func testSilentNodeHandOff(t *testing.T, sameBatch bool) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const (
		// The renewals are given up after a third of the lease (4 s): longer than what is
		// left of the claim lease at its confirmation (2 s).
		clientLease = 12 * time.Second
		retry       = time.Second // the releaser's: a claim lease of 3 retry intervals
		// The silent master holds every renewal back past the renewals' timeout.
		silence = clientLease/3 + 2*time.Second
	)
	// A key on the master that goes silent, and one on another master.
	var silentKey, handKey string
	for i := 0; silentKey == "" || handKey == ""; i++ {
		k := fmt.Sprintf("%s-%d", t.Name(), i)
		m, err := cl.MasterOf(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		switch j := slices.Index(cl.Masters, m); {
		case j == 0 && silentKey == "":
			silentKey = k
		case j > 0 && handKey == "":
			handKey = k
		}
	}
	// The renew script loaded on each master, so every renewal is an EVALSHA the stall can tell.
	for _, m := range cl.Masters {
		if err := m.Client(t).ScriptLoad(ctx, luaRenew).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var (
		on          atomic.Bool
		silentHeld  atomic.Int64 // renewals held back by the silent master
		firstSilent atomic.Int64 // when the first was written (unix ns)
		silentLease atomic.Pointer[lease]
	)
	type sighting struct {
		silentBefore   int64 // renewals written to the silent master before the confirmation
		silentInFlight bool  // a renewal of the lock on the silent master in flight meanwhile
	}
	confirmed := make(chan sighting, 1) // the confirmation's first write
	silentAddr := cl.Masters[0].Addr()
	handTag := []byte("{" + handKey + "}")
	stall := func(addr string) func(p []byte) time.Duration {
		return func(p []byte) time.Duration {
			if !on.Load() || !bytes.Contains(p, []byte(scriptRenew.sha)) {
				return 0
			}
			if addr == silentAddr {
				if silentHeld.Add(1) == 1 {
					firstSilent.Store(time.Now().UnixNano())
				}
				return silence
			}
			if bytes.Contains(p, handTag) {
				s := sighting{silentBefore: silentHeld.Load()}
				if sl := silentLease.Load(); sl != nil {
					s.silentInFlight = len(sl.renewing) == 1
				}
				select {
				case confirmed <- s:
				default:
				}
			}
			return 0
		}
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&testNet{stall: stall(addr)}).dial(ctx, network, addr)
	}
	c := New(cl.Client(t, func(o *redis.ClusterOptions) { o.Dialer = dial }), WithLease(clientLease))
	defer c.Close()
	holder := New(cl.Client(t), WithRetryInterval(retry))
	defer holder.Close()
	other := New(cl.Client(t))
	defer other.Close()

	// Hand handKey over from holder to a waiter of c.
	hl, err := holder.TryAcquire(ctx, handKey)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		lk, err := c.Acquire(ctx, handKey)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	rdb := cl.Client(t)
	queue := c.be.(*redisBackend).names(handKey, nil).keys[1]
	if !waitFor(10*time.Second, func() bool { return rdb.ZCard(ctx, queue).Val() == 1 }) {
		t.Fatal("the waiter did not queue")
	}
	if err := hl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hand := <-got
	if hand == nil {
		t.FailNow()
	}
	defer func() { _ = hand.Release(ctx) }()
	hand.l.mu.Lock()
	awaiting, confirmAt := hand.l.confirm, hand.l.renewAt
	hand.l.mu.Unlock()
	if !awaiting {
		t.Fatal("the handed-off lock does not await its confirmation: the scenario was not reached")
	}

	// A lock on the silent master, whose renewal is then made due with the confirmation
	// (sameBatch), or at once, ahead of it.
	sl, err := c.TryAcquire(ctx, silentKey)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sl.Release(ctx) }()
	silentLease.Store(sl.l)
	on.Store(true)
	if sameBatch {
		// Once the loop sleeps until the confirmation, the silent lock's renewal moved to
		// the same moment wakes nothing: the loop takes both when it wakes.
		asleep := waitFor(time.Second, func() bool {
			c.wd.mu.Lock()
			defer c.wd.mu.Unlock()
			return c.wd.next.Equal(confirmAt)
		})
		if !asleep {
			t.Fatal("the watchdog does not wait for the confirmation: the scenario was not reached")
		}
		c.wd.renewBy(sl.l, confirmAt)
	} else {
		c.wd.renewBy(sl.l, time.Now())
	}

	watch := time.NewTimer(silence + 2*time.Second)
	defer watch.Stop()
	select {
	case <-hand.Done():
		t.Fatalf("handed-off lock on a master that answers lost while another master was silent: %v", hand.Err())
	case <-watch.C:
	}
	on.Store(false)

	var s sighting
	select {
	case s = <-confirmed:
	default:
		t.Fatal("no confirmation was sent: the scenario was not reached")
	}
	if !s.silentInFlight {
		t.Fatal("the confirmation went out with no renewal to the silent master in flight: the scenario was not reached")
	}
	if sameBatch && time.Unix(0, firstSilent.Load()).Before(confirmAt) {
		t.Fatal("the renewal to the silent master went out before the confirmation was due, not in its batch: the scenario was not reached")
	}
	if !sameBatch && s.silentBefore == 0 {
		t.Fatal("the confirmation went out before the renewal to the silent master: the scenario was not reached")
	}
	if _, err := other.TryAcquire(ctx, handKey); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another client's TryAcquire of the handed-off lock: %v, want ErrNotObtained", err)
	}
}
