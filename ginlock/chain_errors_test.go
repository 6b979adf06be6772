package ginlock_test

import (
	"errors"
	"math"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// A chain that recorded errors and sent nothing, not even its status, has not answered: the
// answer is whatever renders c.Errors after ginlock (an error middleware placed before it),
// or gin's bare status. Nothing is stored, and the retry runs the handler again. A chain that
// recorded an error but sent its own answer (AbortWithStatusJSON) is stored as usual. A render
// that failed before its first byte (gin records the error, aborts, and sends the bare
// status) is not stored either.
func TestErrorsWithNothingSentNotStored(t *testing.T) {
	e := setup(t)
	// renderErrors is the usual gin error middleware: after the chain, it answers 500 with
	// the last error when nothing was written.
	renderErrors := func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 && !c.Writer.Written() {
			c.JSON(http.StatusInternalServerError, gin.H{"error": c.Errors.Last().Error()})
		}
	}
	// renderAlways renders the last error after the chain whatever was sent (c.JSON(-1)
	// keeps the status): after c.AbortWithError the status is sent, the body is its.
	renderAlways := func(c *gin.Context) {
		c.Next()
		if err := c.Errors.Last(); err != nil {
			c.JSON(-1, gin.H{"error": err.Error()})
		}
	}
	for _, tc := range []struct {
		name      string
		renderer  gin.HandlerFunc      // runs before ginlock, when not nil
		first     func(c *gin.Context) // the first run's answer
		wantFirst int
		stored    bool
	}{
		{"error left to a renderer before ginlock", renderErrors, func(c *gin.Context) {
			_ = c.Error(errors.New("payment provider unreachable"))
		}, http.StatusInternalServerError, false},
		// c.AbortWithError sends the status at once (WriteHeaderNow): the body is whatever
		// renders c.Errors later, unseen by ginlock, so an error status sent without a body
		// is not stored either, else the retry got an empty answer for the first one's body.
		{"AbortWithError rendered before ginlock", renderAlways, func(c *gin.Context) {
			_ = c.AbortWithError(http.StatusBadRequest, errors.New("amount must be positive"))
		}, http.StatusBadRequest, false},
		{"AbortWithError with no renderer", nil, func(c *gin.Context) {
			_ = c.AbortWithError(http.StatusBadRequest, errors.New("amount must be positive"))
		}, http.StatusBadRequest, false},
		// A success sent without a body, with an error recorded for the log: the work is
		// done, so the answer is stored.
		{"error recorded with a success sent without a body", renderErrors, func(c *gin.Context) {
			_ = c.Error(errors.New("audit log unreachable"))
			c.Header("Location", "/payments/1")
			c.AbortWithStatus(http.StatusCreated)
		}, http.StatusCreated, true},
		{"JSON that does not marshal", nil, func(c *gin.Context) {
			c.JSON(http.StatusCreated, gin.H{"amount": math.NaN()})
		}, http.StatusCreated, false},
		{"reader that fails before its first byte", nil, func(c *gin.Context) {
			c.DataFromReader(http.StatusOK, -1, "application/octet-stream", &cutReader{fail: true}, nil)
		}, http.StatusOK, false},
		{"error with an answer of its own", renderErrors, func(c *gin.Context) {
			_ = c.Error(errors.New("card declined"))
			c.AbortWithStatusJSON(http.StatusPaymentRequired, gin.H{"error": "card declined"})
		}, http.StatusPaymentRequired, true},
		// The error recorded after the answer (for a logging middleware): the chain was
		// aborted before the body started, so this is no render that failed part-way.
		{"error recorded after an answer of its own", renderErrors, func(c *gin.Context) {
			c.AbortWithStatusJSON(http.StatusPaymentRequired, gin.H{"error": "card declined"})
			_ = c.Error(errors.New("card declined"))
		}, http.StatusPaymentRequired, true},
		// An answer, then an error and an abort: what gin's c.Render does when its source
		// fails part-way. It cannot be told apart, so it is not stored (docs/ginlock.md
		// tells users to answer with AbortWithStatusJSON instead).
		{"answer then error and abort", renderErrors, func(c *gin.Context) {
			c.JSON(http.StatusPaymentRequired, gin.H{"error": "card declined"})
			_ = c.Error(errors.New("card declined"))
			c.Abort()
		}, http.StatusPaymentRequired, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := router()
			if tc.renderer != nil {
				r.Use(tc.renderer)
			}
			var runs atomic.Int32
			r.POST("/pay", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				if runs.Add(1) == 1 {
					tc.first(c)
					return
				}
				c.JSON(http.StatusCreated, gin.H{"paid": true})
			})
			q := req{path: "/pay", user: "alice", key: idemKey(t), body: `{"amount":1}`}
			first := do(r, q)
			if first.Code != tc.wantFirst {
				t.Fatalf("first: %d %q, want %d", first.Code, first.Body, tc.wantFirst)
			}
			retry := do(r, q)
			replayed := retry.Header().Get(ginlock.ReplayedHeader) == "true"
			if tc.stored {
				if !replayed || retry.Code != first.Code || retry.Body.String() != first.Body.String() || runs.Load() != 1 {
					t.Fatalf("retry: %d %q (replayed %v) after %d runs; want the first answer, %d %q, replayed",
						retry.Code, retry.Body, replayed, runs.Load(), first.Code, first.Body)
				}
				return
			}
			if replayed || retry.Code != http.StatusCreated || runs.Load() != 2 {
				t.Fatalf("retry: %d %q (replayed %v) after %d runs; want the handler run again (201)",
					retry.Code, retry.Body, replayed, runs.Load())
			}
		})
	}
}

// A callback of the user's that panics after the chain (here the WithReplayStatuses
// predicate) does not leave the lock held: the panic goes on to gin's Recovery, and the next
// request on the account gets the lock at once instead of 409 until the process exits.
func TestPanicInFinishReleasesLock(t *testing.T) {
	e := setup(t)
	r := gin.New()
	var recovered atomic.Int32
	r.Use(gin.CustomRecovery(func(c *gin.Context, _ any) {
		recovered.Add(1)
		c.AbortWithStatus(http.StatusInternalServerError)
	}))
	var calls atomic.Int32
	storable := func(status int) bool {
		if calls.Add(1) == 1 {
			panic("status table misconfigured")
		}
		return status < 500
	}
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, accountKey, ginlock.WithReplay(0), ginlock.WithReplayStatuses(storable)),
		func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"ok": true}) })
	do(r, req{path: "/accounts/9/withdraw", body: `{"a":1}`})
	if recovered.Load() != 1 {
		t.Fatalf("the predicate's panic reached Recovery %d times, want 1", recovered.Load())
	}
	if w := do(r, req{path: "/accounts/9/withdraw", body: `{"a":2}`}); w.Code != http.StatusCreated {
		t.Fatalf("next request on the account: %d %s, want 201: the first request's lock was released", w.Code, w.Body)
	}
}

// An error recorded by a middleware placed before ginlock (a non-fatal c.Error: an expired
// optional session cookie, say) is not the chain's: the handler answers 201 with a Location
// and no body, gin sends it, and the retry gets it replayed. The recorder counted every error
// in c.Errors, also those recorded before it existed, so the answer was not stored and the
// payment ran twice.
func TestErrorBeforeGinlockIsNotTheChains(t *testing.T) {
	e := setup(t)
	r := router()
	r.Use(func(c *gin.Context) {
		_ = c.Error(errors.New("optional session cookie expired")).SetType(gin.ErrorTypePrivate)
		c.Next()
	})
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		n := runs.Add(1) // the money moves here
		c.Header("Location", "/payments/"+string(rune('0'+n)))
		c.Status(http.StatusCreated)
	})
	q := req{path: "/payments", user: "alice", key: idemKey(t), body: `{"amount":100}`}
	first := do(r, q)
	if first.Code != http.StatusCreated || first.Header().Get("Location") != "/payments/1" {
		t.Fatalf("first: %d Location %q, want 201 /payments/1", first.Code, first.Header().Get("Location"))
	}
	retry := do(r, q)
	if runs.Load() != 1 || retry.Code != http.StatusCreated || retry.Header().Get("Location") != "/payments/1" ||
		retry.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d Location %q replayed %q after %d handler runs; want the first answer replayed, handler run once",
			retry.Code, retry.Header().Get("Location"), retry.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
}
