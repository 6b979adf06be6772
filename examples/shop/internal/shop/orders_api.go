package shop

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

type createOrderRequest struct {
	AccountID string `json:"account_id"`
	Amount    int64  `json:"amount"`
}

// createOrder: POST /api/orders {"account_id","amount"} -> 201 Order.
func (a *App) createOrder(c *gin.Context) {
	var req createOrderRequest
	if !bindJSON(c, &req) {
		return
	}
	if req.Amount <= 0 {
		fail(c, http.StatusBadRequest, codeInvalidAmount)
		return
	}
	o, err := a.store.CreateOrder(c.Request.Context(), req.AccountID, req.Amount)
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	c.JSON(http.StatusCreated, o)
}

// getOrder: GET /api/orders/:id -> 200 Order.
func (a *App) getOrder(c *gin.Context) {
	o, err := a.store.Order(c.Request.Context(), c.Param("id"))
	if err != nil {
		a.failErr(c, err, codeOrderNotFound)
		return
	}
	c.JSON(http.StatusOK, o)
}

// idempotencyKey is the Idempotency-Key as the protected pay route reads it.
var idempotencyKey = keyfunc.Join(keyfunc.IdempotencyKey())

// requireIdempotencyKey answers 400 when the Idempotency-Key header is missing or blank
// (missing_idempotency_key) or is not a key ginlock accepts: over 255 characters, bytes
// outside printable ASCII, a broken sf-string, the header sent on more than one line
// (invalid_idempotency_key). It reads the key through ginlock's Source, as the middleware
// does, so both agree on every header. It runs in both modes, so the unprotected shop keeps
// the same contract and the protected one answers in the shop's error shape before ginlock
// sees the key.
func requireIdempotencyKey(c *gin.Context) {
	_, err := idempotencyKey.Key(ginlock.NewSource(c, 0))
	switch {
	case errors.Is(err, keyfunc.ErrMissing):
		fail(c, http.StatusBadRequest, codeMissingKey)
	case err != nil:
		fail(c, http.StatusBadRequest, codeInvalidKey)
	}
}

// pay: POST /api/orders/:id/pay -> 200 {"order_id","status":"paid","balance"}. The naive
// steps: check the order is pending, read the balance, charge through the provider, write
// the balance, mark the order paid and append the charge (one transaction). Protected, the route holds the
// order's lock around all of them (so the already-paid check cannot be raced) and replays
// the stored answer to a retry with the same Idempotency-Key.
func (a *App) pay(c *gin.Context) {
	ctx := c.Request.Context()
	o, err := a.store.Order(ctx, c.Param("id"))
	if err != nil {
		a.failErr(c, err, codeOrderNotFound)
		return
	}
	if o.Status != StatusPending {
		fail(c, http.StatusConflict, codeAlreadyPaid)
		return
	}
	snap, err := a.store.ReadBalance(ctx, o.AccountID, fence(ctx))
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	if snap.Balance < o.Amount {
		fail(c, http.StatusPaymentRequired, codeInsufficientFunds)
		return
	}
	var balance int64
	err = a.provider.Call(ctx)
	if err == nil {
		balance, err = a.store.Apply(ctx, snap, Entry{AccountID: o.AccountID, OrderID: o.ID, Kind: KindCharge, Amount: o.Amount}, StatusPaid)
	}
	if err != nil {
		a.failErr(c, err, codeOrderNotFound)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order_id": o.ID, "status": StatusPaid, "balance": balance})
}

// refund: POST /api/orders/:id/refund -> 202 {"order_id","status":"refund_queued"}. It
// only enqueues a refund task; the worker credits the account. 409 when the order is not
// paid (not_paid) or already refunded (already_refunded).
func (a *App) refund(c *gin.Context) {
	ctx := c.Request.Context()
	o, err := a.store.Order(ctx, c.Param("id"))
	if err != nil {
		a.failErr(c, err, codeOrderNotFound)
		return
	}
	switch o.Status {
	case StatusPending:
		fail(c, http.StatusConflict, codeNotPaid)
		return
	case StatusRefunded:
		fail(c, http.StatusConflict, codeAlreadyRefunded)
		return
	}
	task, err := newRefundTask(o)
	if err != nil {
		a.failErr(c, err, codeOrderNotFound)
		return
	}
	if _, err := a.queue.EnqueueContext(ctx, task); err != nil {
		queueUnavailable(c, a.log, "refund not queued", "order", o.ID, "err", err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"order_id": o.ID, "status": "refund_queued"})
}

// queueStats: GET /api/queue -> 200 {"pending","active","scheduled","retry","archived"}:
// the refund tasks not yet done, so a load driver can wait for the worker to drain.
func (a *App) queueStats(c *gin.Context) {
	queues, err := a.inspector.Queues()
	if err != nil {
		queueUnavailable(c, a.log, "queue not read", "err", err)
		return
	}
	if !slices.Contains(queues, refundQueue) { // created by the first enqueue
		c.JSON(http.StatusOK, gin.H{"pending": 0, "active": 0, "scheduled": 0, "retry": 0, "archived": 0})
		return
	}
	info, err := a.inspector.GetQueueInfo(refundQueue)
	if err != nil {
		queueUnavailable(c, a.log, "queue not read", "err", err)
		return
	}
	c.JSON(http.StatusOK, gin.H{
		"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
		"retry": info.Retry, "archived": info.Archived,
	})
}

// queueUnavailable answers a request the queue could not serve. The queue is Redis: down or
// unreachable is temporary, like the lock store on the other routes (503 with Retry-After),
// not a fault of the shop; the cause goes to the log.
func queueUnavailable(c *gin.Context, log *slog.Logger, msg string, args ...any) {
	log.Warn(msg, args...)
	c.Header("Retry-After", "1")
	fail(c, http.StatusServiceUnavailable, codeUnavailable)
}
