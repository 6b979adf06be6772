package shop

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
)

// lockWaits tracks the requests that are waiting for their locks, so that a shutdown can
// stop those waits at once. A waiting request has done nothing yet: stopped, it answers 503
// unavailable with Retry-After and its client can retry it elsewhere or after the restart.
// Left alone, it would hold the shutdown for up to the route's 10 s wait. A request that
// got its locks runs on: it is stopped only if it outlives the shutdown wait.
type lockWaits struct {
	mu       sync.Mutex
	stopped  bool
	nextID   uint64
	inFlight map[uint64]context.CancelCauseFunc
}

// waitIDKey holds a request's id in lockWaits, between enter and obtained.
const waitIDKey = "shop.lockWait"

func newLockWaits() *lockWaits {
	return &lockWaits{inFlight: make(map[uint64]context.CancelCauseFunc)}
}

// guard returns the lock middlewares mw between enter and obtained, then h: the context
// the middlewares wait with can be stopped by stop until they let the request through.
// Without middlewares (unprotected) it is h alone.
func (w *lockWaits) guard(mw []gin.HandlerFunc, h gin.HandlerFunc) []gin.HandlerFunc {
	if len(mw) == 0 {
		return []gin.HandlerFunc{h}
	}
	return append(append([]gin.HandlerFunc{w.enter}, mw...), w.obtained, h)
}

// enter gives the request a context that stop can end, registered until obtained runs or
// the request ends.
func (w *lockWaits) enter(c *gin.Context) {
	ctx, cancel := context.WithCancelCause(c.Request.Context())
	defer cancel(nil)
	w.mu.Lock()
	id := w.nextID
	w.nextID++
	if w.stopped {
		cancel(errStopped)
	} else {
		w.inFlight[id] = cancel
	}
	w.mu.Unlock()
	defer w.leave(id)
	c.Set(waitIDKey, id)
	orig := c.Request
	c.Request = c.Request.WithContext(ctx)
	c.Next()
	c.Request = orig // the middlewares before this one see the request's own context again
}

// obtained runs once every lock of the route is held: from here on the request is no
// longer stopped by stop. One whose wait stop ended just as its lock was granted answers
// 503 as if it had been stopped in the queue, before the handler runs.
func (w *lockWaits) obtained(c *gin.Context) {
	if id, ok := c.Get(waitIDKey); ok {
		w.leave(id.(uint64))
	}
	if stoppedWaiting(c) {
		failStopped(c)
		return
	}
	c.Next()
}

func (w *lockWaits) leave(id uint64) {
	w.mu.Lock()
	delete(w.inFlight, id)
	w.mu.Unlock()
}

// stop ends the wait of every request waiting for its locks now, and of every one that
// starts waiting later. It returns how many it stopped.
func (w *lockWaits) stop() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	n := len(w.inFlight)
	for id, cancel := range w.inFlight {
		cancel(errStopped)
		delete(w.inFlight, id)
	}
	return n
}

// stoppedWaiting reports whether the request's wait for a lock was ended by a shutdown.
func stoppedWaiting(c *gin.Context) bool {
	return errors.Is(context.Cause(c.Request.Context()), errStopped)
}

// failStopped answers a request stopped by a shutdown before its handler ran: 503
// unavailable, retry in a second (elsewhere, or once the shop is back).
func failStopped(c *gin.Context) {
	c.Header("Retry-After", "1")
	fail(c, http.StatusServiceUnavailable, codeUnavailable)
}
