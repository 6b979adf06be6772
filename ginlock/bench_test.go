package ginlock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

// roundTrips counts client-to-server round trips: one per command, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkMiddleware: a trivial route bare and behind ginlock, uncontended, every request
// with its own Idempotency-Key. The floor with the lock is 2 round trips per request
// (acquire, then release or store), with or without replay; a replayed request costs 1.
func BenchmarkMiddleware(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	locks := dlock.New(rdb)
	b.Cleanup(func() { _ = locks.Close() })

	key := keyfunc.Join(keyfunc.IdempotencyKey())
	handler := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	for _, bc := range []struct {
		name    string
		mw      []gin.HandlerFunc
		sameKey bool
	}{
		{"bare", nil, false},
		{"lock", []gin.HandlerFunc{ginlock.New(locks, key, ginlock.WithoutReplay())}, false},
		{"replay", []gin.HandlerFunc{ginlock.New(locks, key)}, false},
		{"replay-hit", []gin.HandlerFunc{ginlock.New(locks, key)}, true}, // every request a replay
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := gin.New()
			r.POST("/pay", append(bc.mw, handler)...)
			idem := bc.name + "-" + strconv.FormatInt(keySeq.Add(1), 10)
			send := func() {
				if !bc.sameKey {
					idem = bc.name + "-" + strconv.FormatInt(keySeq.Add(1), 10)
				}
				req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":1}`))
				req.Header.Set(keyfunc.IdempotencyKeyHeader, idem)
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			send() // loads the scripts, so EVALSHA misses do not count
			rt.n.Store(0)
			b.ResetTimer()
			for b.Loop() {
				send()
			}
			b.StopTimer()
			b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/op")
		})
	}
}
