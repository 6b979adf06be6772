package ginlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
)

// A handler may release the lock ginlock took for it before it finishes: its answer goes
// out as written (not a 409 "lock lost"), the key is free, and nothing warns of a loss.
// With replay the response cannot be stored any more: the logger says so, and a retry runs
// the handler again.
func TestHandlerReleasesItsOwnHold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []ginlock.Option
		write  bool // the handler writes a body after its release; else it only returns
		replay bool
	}{
		{"lock only with a body", []ginlock.Option{ginlock.WithoutReplay()}, true, false},
		{"lock only with nothing written", []ginlock.Option{ginlock.WithoutReplay()}, false, false},
		{"replay with a body", nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			var logs bytes.Buffer
			opts := append(tc.opts, ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			key := accountKey
			if tc.replay {
				key = payKey
			}
			var runs atomic.Int32
			r := router()
			r.POST("/accounts/:id/statement", ginlock.New(e.locks, key, opts...), func(c *gin.Context) {
				runs.Add(1)
				lk, ok := ginlock.FromContext(c)
				if !ok {
					t.Error("no lock in the handler")
					return
				}
				slow := context.WithoutCancel(c.Request.Context()) // taken before the release, as documented
				if err := lk.Release(c); err != nil {
					t.Errorf("release: %v", err)
				}
				if cause := context.Cause(c.Request.Context()); !errors.Is(cause, dlock.ErrNotHeld) || slow.Err() != nil {
					t.Errorf("after the handler's release: request context cause %v, slow context %v; want ErrNotHeld and live", cause, slow.Err())
				}
				if tc.write {
					c.JSON(http.StatusCreated, gin.H{"statement": 7})
				}
			})
			q := req{path: "/accounts/42/statement", user: "alice", key: idemKey(t)}
			want := http.StatusOK
			if tc.write {
				want = http.StatusCreated
			}
			for i := range 2 {
				w := do(r, q)
				if w.Code != want || w.Header().Get(ginlock.ReplayedHeader) != "" {
					t.Fatalf("request %d: %d %q (replayed %q), want %d from the handler", i, w.Code, w.Body,
						w.Header().Get(ginlock.ReplayedHeader), want)
				}
			}
			if runs.Load() != 2 {
				t.Errorf("handler ran %d times, want 2", runs.Load())
			}
			// The second request ran, so the first freed the key; with the account key, so did
			// the second.
			if !tc.replay {
				lk, err := e.locks.TryAcquire(t.Context(), "account:42")
				if err != nil {
					t.Fatalf("key after the requests: %v, want it free", err)
				}
				_ = lk.Release(t.Context())
			}
			if strings.Contains(logs.String(), "lost") {
				t.Errorf("a lock the handler released was reported lost:\n%s", logs.String())
			}
			notStored := strings.Count(logs.String(), "the handler ended the hold itself")
			if tc.replay && notStored != 2 || !tc.replay && logs.Len() != 0 {
				t.Errorf("logs:\n%s\nwant a warning per request with replay only", logs.String())
			}
		})
	}
}
