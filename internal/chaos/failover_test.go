//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// failoverModes are the settings each failover fault is measured with.
var failoverModes = []struct {
	name string
	opts []dlock.Option
}{
	{"default", nil},
	{"WithReplicaAck(1, 50ms)", []dlock.Option{dlock.WithReplicaAck(1, 50*time.Millisecond)}},
}

// bankOn is a bank whose locks live on rdb (a cluster or a failover client) and whose store is
// on a server of its own, with a dlock Client using opts.
func bankOn(t *testing.T, rdb redis.UniversalClient, opts ...dlock.Option) (*bank, *dlock.Client) {
	t.Helper()
	b := &bank{t: t, resSrv: redistest.Start(t), key: t.Name(), rec: NewRecorder(nil)}
	b.store = NewStore(b.resSrv.Client(t), strings.ReplaceAll(t.Name(), "/", "_"))
	c := dlock.New(rdb, append([]dlock.Option{dlock.WithLease(lease), dlock.WithRetryInterval(retry)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return b, c
}

// Fault 7: the master holding the lock's slot fails over to its replica in the middle of a
// run (CLUSTER FAILOVER FORCE: the replica takes over without waiting to catch up, as after a
// master crash). Measured with the default settings and with WithReplicaAck.
func TestFaultClusterFailover(t *testing.T) {
	for _, mode := range failoverModes {
		t.Run(mode.name, func(t *testing.T) {
			cl := redistest.StartCluster(t, redistest.WithReplicas(1))
			rdb := cl.Client(t, func(o *redis.ClusterOptions) {
				o.ReadTimeout, o.DialTimeout = 300*time.Millisecond, 300*time.Millisecond
			})
			b, c := bankOn(t, rdb, mode.opts...)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := b.run(ctx, c, 6, 5*time.Millisecond)
			b.waitWork(ctx, 20)

			lockKey := "lockguard:{" + b.key + "}:lock"
			master, err := cl.MasterOf(context.Background(), lockKey)
			if err != nil {
				t.Fatal(err)
			}
			replica := replicaOf(t, master)
			start := time.Now()
			if err := replica.Do(context.Background(), "CLUSTER", "FAILOVER", "FORCE").Err(); err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
			for {
				now, err := cl.MasterOf(wctx, lockKey)
				if err == nil && now.Addr() != master.Addr() {
					break
				}
				if wctx.Err() != nil {
					t.Fatal("the slot never moved to the replica")
				}
				time.Sleep(20 * time.Millisecond)
			}
			err = cl.WaitOK(wctx)
			wcancel()
			if err != nil {
				t.Fatal(err)
			}
			heal := time.Now()
			runPastHeal(heal, cancel)
			wait()
			r := b.check("cluster failover (CLUSTER FAILOVER FORCE), "+mode.name, heal,
				fmt.Sprintf("failover_took=%v", heal.Sub(start).Round(time.Millisecond)))
			if r.FirstAckAfter == 0 || r.FirstAckAfter > resumeBound {
				t.Errorf("work resumed %v after the failover (0: not at all), want within %v", r.FirstAckAfter, resumeBound)
			}
		})
	}
}

// replicaOf returns a client on the replica of master (tests only).
func replicaOf(t *testing.T, master *redistest.Server) *redis.Client {
	t.Helper()
	mc := master.Client(t)
	id, err := mc.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := mc.Do(context.Background(), "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil || len(lines) == 0 {
		t.Fatalf("replicas of %s: %v %v", master.Addr(), lines, err)
	}
	addr := strings.SplitN(strings.Fields(lines[0])[1], "@", 2)[0]
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}
