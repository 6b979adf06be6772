package shop

import (
	"github.com/gin-gonic/gin"
	"github.com/hibiken/asynq"
)

// Protection is the set of lock middlewares the shop runs with. The zero value is the
// unprotected shop: the same routes and task handler, without locks.
type Protection struct {
	// Pay runs, in order, on POST /api/orders/:id/pay after the Idempotency-Key presence check.
	Pay []gin.HandlerFunc
	// Withdraw runs, in order, on POST /api/accounts/:id/withdraw.
	Withdraw []gin.HandlerFunc
	// Refund wraps the refund task handler.
	Refund asynq.MiddlewareFunc
	// IsFailure and RetryDelay go into the worker's asynq.Config, so a task that found its
	// lock busy comes back soon without using up a retry. Nil keeps asynq's defaults.
	IsFailure  func(error) bool
	RetryDelay asynq.RetryDelayFunc
}

// enabled reports whether any lock is configured.
func (p Protection) enabled() bool {
	return p.Pay != nil || p.Withdraw != nil || p.Refund != nil
}
