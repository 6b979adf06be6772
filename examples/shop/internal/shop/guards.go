package shop

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// lockWait is how long a request or task queues for a busy account lock before giving up
// (409 for a request, a retry for a task). Holds last one provider call (20-50 ms), so
// even a queue of a hundred requests on one account clears in this time.
const lockWait = 10 * time.Second

// Protect builds the shop's lock middlewares on locks:
//
//   - pay: an idempotency layer keyed by the Idempotency-Key (409 while the first request
//     with that key runs, the stored answer replayed after, 422 for the key reused on another
//     order), then the account lock of the order's account, waited for, so pays with
//     different keys for one order, and pays, withdrawals and refunds of one account, run
//     one at a time;
//   - withdraw: the account lock account:{id}, waited for;
//   - refund task: a per-order lock with a done marker (a refund runs once, however often
//     it is enqueued or delivered), then the same account:{account_id} lock as HTTP.
//
// The account key is the same string on both sides, "account:" and the account id, which
// is what makes a refund in the worker and a withdrawal over HTTP exclude each other.
//
// log receives what clients never see (lost locks, failed releases); nil discards it.
func Protect(locks *dlock.Client, store *Store, log *slog.Logger) Protection {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	accountOfOrder := keyfunc.From("account", func(src keyfunc.Source) (string, error) {
		id, ok := src.Value(keyfunc.KindParam, "id")
		if !ok {
			return "", keyfunc.ErrMissing
		}
		// An order never changes account, so reading it before the lock is safe.
		o, err := store.Order(src.Context(), id)
		if err != nil {
			return "", err
		}
		return o.AccountID, nil
	})
	accountKey := func(p keyfunc.Part) *keyfunc.Func {
		return keyfunc.MustTemplate("account:{account}", map[string]keyfunc.Part{"account": p})
	}

	// The key alone, not the order: a key reused to pay another order finds the first
	// order's record, whose fingerprint (method, path, body) differs, and gets 422.
	payOnce := ginlock.New(locks, keyfunc.MustTemplate("pay:{key}", map[string]keyfunc.Part{
		"key": keyfunc.IdempotencyKey(),
	}),
		// 409s are not stored: one from the account lock's wait running out must not be
		// replayed to a retry, and already_paid is found again by the handler anyway.
		ginlock.WithReplayStatuses(func(s int) bool { return s < 500 && s != http.StatusConflict }),
		ginlock.WithErrorHandler(stoppedFirst(ginlock.DefaultErrorHandler)), ginlock.WithLogger(log),
	)
	payAccount := ginlock.New(locks, accountKey(accountOfOrder),
		ginlock.WithoutReplay(), ginlock.WithWait(lockWait),
		ginlock.WithErrorHandler(stoppedFirst(orderNotFound)), ginlock.WithLogger(log))

	withdraw := ginlock.New(locks, accountKey(keyfunc.Param("id")),
		ginlock.WithoutReplay(), ginlock.WithWait(lockWait), ginlock.WithErrorHandler(stoppedFirst(accountNotFound)),
		ginlock.WithLogger(log))

	refundOnce := asynqlock.New(locks,
		keyfunc.MustTemplate("refund:{order}", map[string]keyfunc.Part{"order": keyfunc.JSON("order_id")}),
		asynqlock.WithDoneMarker(24*time.Hour), asynqlock.WithWait(lockWait),
		asynqlock.WithRetryIn(time.Second), asynqlock.WithLogger(log))
	refundAccount := asynqlock.New(locks, accountKey(keyfunc.JSON("account_id")),
		asynqlock.WithWait(lockWait), asynqlock.WithRetryIn(time.Second), asynqlock.WithLogger(log))

	return Protection{
		Pay:      []gin.HandlerFunc{payOnce, payAccount},
		Withdraw: []gin.HandlerFunc{withdraw},
		Refund: func(h asynq.Handler) asynq.Handler {
			return refundOnce(refundAccount(h))
		},
		IsFailure:  asynqlock.IsFailure,
		RetryDelay: asynqlock.RetryDelay(nil),
	}
}

// stoppedFirst answers a request that a shutdown stopped before it held its locks
// (lockWaits.stop) as the shop's 503 unavailable, whatever the lock middleware made of it: a
// busy lock (409, which would blame another request), a store failure, or a key function
// whose database read the stop cut short (500). Other errors go to h.
func stoppedFirst(h func(c *gin.Context, status int, err error)) func(c *gin.Context, status int, err error) {
	return func(c *gin.Context, status int, err error) {
		if stoppedWaiting(c) {
			failStopped(c)
			return
		}
		h(c, status, err)
	}
}

// accountNotFound keeps the contract's 404 for an account id too long to be a lock key part
// (keyfunc's bound): no account has such an id, and the unprotected route answers 404 too.
func accountNotFound(c *gin.Context, status int, err error) {
	if errors.Is(err, keyfunc.ErrTooLong) {
		fail(c, http.StatusNotFound, codeAccountNotFound)
		return
	}
	ginlock.DefaultErrorHandler(c, status, err)
}

// orderNotFound keeps the contract's 404 for an unknown order on the protected pay route,
// where the account lookup of the key fails before the handler runs.
func orderNotFound(c *gin.Context, status int, err error) {
	if errors.Is(err, ErrNotFound) {
		fail(c, http.StatusNotFound, codeOrderNotFound)
		return
	}
	ginlock.DefaultErrorHandler(c, status, err)
}
