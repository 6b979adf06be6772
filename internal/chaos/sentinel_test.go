//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// waitLinked waits until replica has synced with its master.
func waitLinked(t *testing.T, replica *redistest.Server) {
	t.Helper()
	rc := replica.Client(t)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(rc.Info(context.Background(), "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("replica never synced")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Fault 7, Sentinel: SENTINEL FAILOVER promotes the replica mid-run; the failover client
// follows. Measured with the default settings and with WithReplicaAck.
func TestFaultSentinelFailover(t *testing.T) {
	for _, mode := range failoverModes {
		t.Run(mode.name, func(t *testing.T) {
			fast := redistest.WithArgs("--repl-diskless-sync-delay", "0")
			master := redistest.Start(t, fast)
			// Two replicas: one to promote, one that follows the new master at once.
			for range 2 {
				replica := redistest.Start(t, fast, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
				waitLinked(t, replica)
			}
			sentinel := redistest.StartSentinel(t, master, "lg").Addr()
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "lg", SentinelAddrs: []string{sentinel},
				ReadTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
			t.Cleanup(func() { _ = rdb.Close() })
			b, c := bankOn(t, rdb, mode.opts...)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wait := b.run(ctx, c, 6, 5*time.Millisecond)
			b.waitWork(ctx, 20)
			sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
			defer sc.Close()
			start := time.Now()
			if err := sc.Failover(context.Background(), "lg").Err(); err != nil {
				t.Fatal(err)
			}
			for {
				addr, err := sc.GetMasterAddrByName(context.Background(), "lg").Result()
				if err == nil && addr[1] != strconv.Itoa(master.Port()) {
					break
				}
				if time.Since(start) > 15*time.Second {
					t.Fatal("sentinel never promoted the replica")
				}
				time.Sleep(20 * time.Millisecond)
			}
			heal := time.Now()
			runPastHeal(heal, cancel)
			wait()
			r := b.check("sentinel failover (SENTINEL FAILOVER), "+mode.name, heal,
				fmt.Sprintf("failover_took=%v", heal.Sub(start).Round(time.Millisecond)))
			if r.FirstAckAfter == 0 || r.FirstAckAfter > resumeBound {
				t.Errorf("work resumed %v after the failover (0: not at all), want within %v", r.FirstAckAfter, resumeBound)
			}
		})
	}
}
