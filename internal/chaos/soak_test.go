//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/locktest"
	"github.com/lockguard/lockguard/internal/redistest"
)

// soakSample is one reading of the shop process and its Redis.
type soakSample struct {
	at                time.Time
	rssKB, fds, thr   int64
	keys, clients     int64
	redisMem          int64
	lockKeys, fences  int64 // held lockguard locks and queue keys; released locks' fence hashes
	records, otherKey int64 // lockguard completion records; keys not under lockguard:
	noTTL             int64 // lockguard keys without a TTL
	healthy           bool
}

// sampleSoak reads /proc for pid, Redis INFO and every key's kind and TTL.
func sampleSoak(ctx context.Context, rdb *redis.Client, api *shopAPI, pid int) soakSample {
	s := soakSample{at: time.Now(), rssKB: procStatus(pid, "VmRSS"), thr: procStatus(pid, "Threads"), fds: int64(openFDs(pid))}
	s.keys = rdb.DBSize(ctx).Val()
	info := rdb.Info(ctx, "memory", "clients").Val()
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			fmt.Sscan(v, &s.redisMem)
		}
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			fmt.Sscan(v, &s.clients)
		}
	}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	var lg []string
	for iter.Next(ctx) {
		k := iter.Val()
		if !strings.HasPrefix(k, "lockguard:") {
			s.otherKey++
			continue
		}
		lg = append(lg, k)
		switch {
		case strings.HasSuffix(k, "}:done"):
			s.records++
		case strings.HasSuffix(k, "}:lock") && released(ctx, rdb, k):
			s.fences++
		default:
			s.lockKeys++
		}
	}
	for chunk := range slices.Chunk(lg, 500) {
		cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range chunk {
				p.PTTL(ctx, k)
			}
			return nil
		})
		for _, c := range cmds {
			if d, err := c.(*redis.DurationCmd).Result(); err == nil && d == -1 {
				s.noTTL++
			}
		}
	}
	r := api.do(ctx, "GET", "/healthz", nil, nil)
	s.healthy = r.err == nil && r.status == http.StatusOK
	return s
}

// released reports whether the lock hash at k is a released lock's (kept for its token).
func released(ctx context.Context, rdb *redis.Client, k string) bool {
	owner, err := locktest.Owner(ctx, rdb, k)
	return err == nil && owner == ""
}

// Bounded soak: mixed HTTP load on the shop (a child process) from goroutines on loopback
// for 60 s (CHAOS_SOAK=20s shortens it). The shop's memory, threads and file descriptors, and
// Redis's connections and key counts, must be flat: the last window against the first one
// after warm-up. lockguard keys all carry TTLs, no lock or queue entry outlives the load,
// and every account's balance matches its ledger.
func TestSoakShop(t *testing.T) {
	dur := 60 * time.Second
	if v := os.Getenv("CHAOS_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_SOAK=%q: %v", v, err)
		}
		dur = d
	}
	warm, window := min(10*time.Second, dur/6), min(10*time.Second, dur/4)

	rs := redistest.Start(t)
	rdb := rs.Client(t)
	sp := startShop(t, buildShop(t), rs.Addr(), filepath.Join(t.TempDir(), "shop.db"), freeAddr(t))
	api := newShopAPI(sp.URL)
	defer api.close()

	const (
		workers   = 16
		nAccounts = 16
		opening   = int64(1_000_000_000_000)
	)
	accts := make([]shopAccount, nAccounts)
	for i := range accts {
		api.must(t, "POST", "/api/accounts", map[string]any{"owner": fmt.Sprintf("soak-%d", i), "balance": opening}, http.StatusCreated, &accts[i])
	}

	var (
		ops, errs, pays, dupes, refunds atomic.Int64
		latMu                           sync.Mutex
		lat                             = map[int][]time.Duration{} // by second since start
		paidMu                          sync.Mutex
		paid                            []string
	)
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(dur))
	defer cancel()
	call := func(method, path string, body any, header map[string]string) reply {
		t0 := time.Now()
		r := api.do(ctx, method, path, body, header)
		if ctx.Err() != nil {
			return r
		}
		ops.Add(1)
		if r.err != nil || r.status >= 500 {
			errs.Add(1)
		}
		latMu.Lock()
		sec := int(t0.Sub(start) / time.Second)
		lat[sec] = append(lat[sec], time.Since(t0))
		latMu.Unlock()
		return r
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for n := 0; ctx.Err() == nil; n++ {
				acct := accts[rng.IntN(nAccounts)].ID
				switch p := rng.IntN(100); {
				case p < 35: // a new order paid, one time in five by a double click
					r := call("POST", "/api/orders", map[string]any{"account_id": acct, "amount": 1 + rng.IntN(999)}, nil)
					var o shopOrder
					if r.status != http.StatusCreated || json.Unmarshal(r.body, &o) != nil {
						continue
					}
					hdr := map[string]string{"Idempotency-Key": fmt.Sprintf("soak-%d-%d", w, n)}
					pays.Add(1)
					var dw sync.WaitGroup
					if rng.IntN(5) == 0 {
						dupes.Add(1)
						dw.Go(func() { call("POST", "/api/orders/"+o.ID+"/pay", nil, hdr) })
					}
					r = call("POST", "/api/orders/"+o.ID+"/pay", nil, hdr)
					dw.Wait()
					if r.status == http.StatusOK {
						paidMu.Lock()
						paid = append(paid, o.ID)
						paidMu.Unlock()
					}
				case p < 55:
					call("POST", "/api/accounts/"+acct+"/withdraw", map[string]any{"amount": 1 + rng.IntN(99)}, nil)
				case p < 65: // refund one paid order (twice now and then: the worker runs it once)
					paidMu.Lock()
					var id string
					if len(paid) > 0 {
						i := rng.IntN(len(paid))
						id = paid[i]
						paid = slices.Delete(paid, i, i+1)
					}
					paidMu.Unlock()
					if id != "" {
						refunds.Add(1)
						call("POST", "/api/orders/"+id+"/refund", nil, nil)
					}
				case p < 95:
					call("GET", "/api/accounts/"+acct, nil, nil)
				default:
					call("GET", "/healthz", nil, nil)
				}
			}
		})
	}
	var samples []soakSample
	tick := time.NewTicker(time.Second)
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			samples = append(samples, sampleSoak(context.Background(), rdb, api, sp.pid()))
		case <-ctx.Done():
		}
	}
	tick.Stop()
	wg.Wait()

	// The refund worker drains, then no lock or queue entry is left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var q struct{ Pending, Active, Scheduled, Retry int }
		api.must(t, "GET", "/api/queue", nil, http.StatusOK, &q)
		if q.Pending+q.Active+q.Scheduled+q.Retry == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refund queue not drained: %+v", q)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	end := sampleSoak(context.Background(), rdb, api, sp.pid())
	for _, a := range accts {
		ledgerCheck(t, api, a.ID, opening)
	}

	// First window after warm-up against the last window.
	avg := func(from, to time.Duration, f func(soakSample) int64) float64 {
		var sum, n float64
		for _, s := range samples {
			if at := s.at.Sub(start); at >= from && at < to {
				sum += float64(f(s))
				n++
			}
		}
		return sum / max(n, 1)
	}
	p99 := func(from, to time.Duration) time.Duration {
		latMu.Lock()
		defer latMu.Unlock()
		var all []time.Duration
		for sec, l := range lat {
			if at := time.Duration(sec) * time.Second; at >= from && at < to {
				all = append(all, l...)
			}
		}
		if len(all) == 0 {
			return 0
		}
		slices.Sort(all)
		return all[len(all)*99/100]
	}
	first, last := [2]time.Duration{warm, warm + window}, [2]time.Duration{dur - window, dur}
	metric := func(f func(soakSample) int64) (float64, float64) {
		return avg(first[0], first[1], f), avg(last[0], last[1], f)
	}
	rss0, rss1 := metric(func(s soakSample) int64 { return s.rssKB })
	fd0, fd1 := metric(func(s soakSample) int64 { return s.fds })
	thr0, thr1 := metric(func(s soakSample) int64 { return s.thr })
	cl0, cl1 := metric(func(s soakSample) int64 { return s.clients })
	oth0, oth1 := metric(func(s soakSample) int64 { return s.otherKey })
	lk0, lk1 := metric(func(s soakSample) int64 { return s.lockKeys })
	unhealthy, noTTL := 0, int64(0)
	for _, s := range samples {
		if !s.healthy {
			unhealthy++
		}
		noTTL = max(noTTL, s.noTTL)
	}
	lat0, lat1 := p99(first[0], first[1]), p99(last[0], last[1])
	t.Logf("RESULT | soak %v, %d clients, mixed pay/withdraw/refund/read | ops=%d errors=%d pays=%d double_clicks=%d refunds=%d rss_mb=%.1f->%.1f fds=%.0f->%.0f threads=%.0f->%.0f redis_clients=%.0f->%.0f lock_queue_keys=%.1f->%.1f(end %d) asynq_keys=%.0f->%.0f records=%d fences=%d keys_without_ttl=%d redis_mem_mb=%.1f unhealthy_samples=%d p99=%v->%v",
		dur, workers, ops.Load(), errs.Load(), pays.Load(), dupes.Load(), refunds.Load(), rss0/1024, rss1/1024, fd0, fd1, thr0, thr1,
		cl0, cl1, lk0, lk1, end.lockKeys, oth0, oth1, end.records, end.fences, max(noTTL, end.noTTL), float64(end.redisMem)/(1<<20),
		unhealthy, lat0.Round(time.Millisecond), lat1.Round(time.Millisecond))

	switch {
	case errs.Load() > 0:
		t.Errorf("%d requests failed (5xx or no answer)", errs.Load())
	case unhealthy > 0:
		t.Errorf("/healthz failed in %d samples", unhealthy)
	}
	if rss1 > rss0*1.25+8*1024 {
		t.Errorf("shop RSS grew from %.1f MB to %.1f MB", rss0/1024, rss1/1024)
	}
	if fd1 > fd0+16 || thr1 > thr0+8 || cl1 > cl0+8 {
		t.Errorf("fds %.0f->%.0f, threads %.0f->%.0f, Redis clients %.0f->%.0f", fd0, fd1, thr0, thr1, cl0, cl1)
	}
	if oth1 > oth0+16 {
		t.Errorf("non-lockguard (asynq) keys grew from %.0f to %.0f", oth0, oth1)
	}
	if end.lockKeys != 0 || noTTL > 0 || end.noTTL > 0 {
		t.Errorf("after the load: %d lock/queue keys, %d lockguard keys without TTL", end.lockKeys, max(noTTL, end.noTTL))
	}
	// One record per pay key (ginlock replay) and per refunded order (asynqlock done marker).
	if end.records > pays.Load()+refunds.Load() {
		t.Errorf("%d completion records for %d pay keys and %d refunds", end.records, pays.Load(), refunds.Load())
	}
}
