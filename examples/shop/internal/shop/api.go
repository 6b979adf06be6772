package shop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
)

// maxBody caps request bodies (413 body_too_large above it); the shop's requests are a few
// dozen bytes.
const maxBody = 64 << 10

// Error codes of the JSON error bodies, {"error": code}.
const (
	codeBadJSON           = "bad_json"
	codeBodyTooLarge      = "body_too_large"
	codeInvalidOwner      = "invalid_owner"
	codeInvalidBalance    = "invalid_balance"
	codeInvalidAmount     = "invalid_amount"
	codeAccountNotFound   = "account_not_found"
	codeOrderNotFound     = "order_not_found"
	codeInsufficientFunds = "insufficient_funds"
	codeAlreadyPaid       = "already_paid"
	codeNotPaid           = "not_paid"
	codeAlreadyRefunded   = "already_refunded"
	codeMissingKey        = "missing_idempotency_key"
	codeInvalidKey        = "invalid_idempotency_key"
	codeLockLost          = "lock_lost"
	codeUnavailable       = "unavailable"
	codeInternal          = "internal"
)

// fail aborts the request with a JSON error body.
func fail(c *gin.Context, status int, code string) {
	c.AbortWithStatusJSON(status, gin.H{"error": code})
}

// failErr answers an error from the store or the provider: 404 for unknown ids; 409
// lock_lost with Retry-After when the account lock was lost (its context ended with
// dlock.ErrLockLost) or superseded (ErrFenced: the write was refused), as ginlock answers a
// lost lock; 503 with Retry-After when the request's context ended otherwise (client gone,
// or a shutdown stopped it: nothing was written, so a retry is safe); 500 otherwise.
func (a *App) failErr(c *gin.Context, err error, notFoundCode string) {
	ctx := c.Request.Context()
	switch {
	case errors.Is(err, ErrNotFound):
		fail(c, http.StatusNotFound, notFoundCode)
	case errors.Is(err, ErrFenced), errors.Is(context.Cause(ctx), dlock.ErrLockLost):
		a.log.Warn("account lock lost", "path", c.FullPath(), "err", err)
		c.Header("Retry-After", "1")
		fail(c, http.StatusConflict, codeLockLost)
	case c.Request.Context().Err() != nil:
		a.log.Warn("request stopped", "path", c.FullPath(), "err", err, "cause", context.Cause(c.Request.Context()))
		c.Header("Retry-After", "1")
		fail(c, http.StatusServiceUnavailable, codeUnavailable)
	default:
		a.log.Error("request failed", "path", c.FullPath(), "err", err)
		fail(c, http.StatusInternalServerError, codeInternal)
	}
}

// failBody answers a body that could not be read or decoded (err, or nil for one that
// decoded but is not what the route takes): 413 body_too_large over maxBody, 400 bad_json
// otherwise.
func failBody(c *gin.Context, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		fail(c, http.StatusRequestEntityTooLarge, codeBodyTooLarge)
		return
	}
	fail(c, http.StatusBadRequest, codeBadJSON)
}

// readBodyFirst reads the whole body (up to maxBody) before the route queues for a lock, and
// hands it on buffered; a body it cannot read is answered as bindJSON would answer it. The
// server's ReadTimeout, counted from the request's start, is there for a client that sends
// slowly: read after a long wait in the queue, a body that had not arrived with the headers
// (a second segment, Expect: 100-continue) would fail on it.
func readBodyFirst(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBody))
	if err != nil {
		failBody(c, err)
		return
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
}

// bindJSON decodes the body into v, answering 400 bad_json when it is not one JSON value of
// the right shape: anything after it but white space (a second object, a stray bracket) is
// refused too, since the request would otherwise mean something other than what was sent.
// A body over maxBody is 413 body_too_large.
func bindJSON(c *gin.Context, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		failBody(c, err)
		return false
	}
	if err := dec.Decode(&json.RawMessage{}); err != io.EOF {
		failBody(c, err)
		return false
	}
	return true
}

type createAccountRequest struct {
	Owner   string `json:"owner"`
	Balance int64  `json:"balance"`
}

// createAccount: POST /api/accounts {"owner","balance"} -> 201 Account.
func (a *App) createAccount(c *gin.Context) {
	var req createAccountRequest
	if !bindJSON(c, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.Owner) == "" || len(req.Owner) > 100:
		fail(c, http.StatusBadRequest, codeInvalidOwner)
		return
	case req.Balance < 0:
		fail(c, http.StatusBadRequest, codeInvalidBalance)
		return
	}
	acc, err := a.store.CreateAccount(c.Request.Context(), req.Owner, req.Balance)
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	c.JSON(http.StatusCreated, acc)
}

// getAccount: GET /api/accounts/:id -> 200 Account.
func (a *App) getAccount(c *gin.Context) {
	acc, err := a.store.Account(c.Request.Context(), c.Param("id"))
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	c.JSON(http.StatusOK, acc)
}

// getLedger: GET /api/accounts/:id/ledger -> 200 [Entry].
func (a *App) getLedger(c *gin.Context) {
	entries, err := a.store.Ledger(c.Request.Context(), c.Param("id"))
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	c.JSON(http.StatusOK, entries)
}

type amountRequest struct {
	Amount int64 `json:"amount"`
}

// withdraw: POST /api/accounts/:id/withdraw {"amount"} -> 200 {"balance"}. The naive
// steps: read the balance, pay out through the provider, write the balance and append to
// the ledger (one transaction). Protected, the route holds the account:{id} lock around all of them.
func (a *App) withdraw(c *gin.Context) {
	var req amountRequest
	if !bindJSON(c, &req) {
		return
	}
	if req.Amount <= 0 {
		fail(c, http.StatusBadRequest, codeInvalidAmount)
		return
	}
	ctx, id := c.Request.Context(), c.Param("id")
	snap, err := a.store.ReadBalance(ctx, id, fence(ctx))
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	if snap.Balance < req.Amount {
		fail(c, http.StatusPaymentRequired, codeInsufficientFunds)
		return
	}
	var balance int64
	err = a.provider.Call(ctx)
	if err == nil {
		balance, err = a.store.Apply(ctx, snap, Entry{AccountID: id, Kind: KindWithdraw, Amount: req.Amount}, "")
	}
	if err != nil {
		a.failErr(c, err, codeAccountNotFound)
		return
	}
	c.JSON(http.StatusOK, gin.H{"balance": balance})
}

// fence is the fencing token of the account lock ctx carries, or 0 in the unprotected shop.
// On every balance path the account lock is the innermost one: dlock.FromContext finds it.
func fence(ctx context.Context) int64 {
	if l, ok := dlock.FromContext(ctx); ok {
		return l.Token()
	}
	return 0
}

// health: GET /healthz -> 200 when Redis and the database answer, 503 otherwise; both say
// whether the shop is protected, which the page shows. The cause goes to the log, not to the
// answer, which would show internal addresses.
func (a *App) health(c *gin.Context) {
	ctx := c.Request.Context()
	if err := a.rdb.Ping(ctx).Err(); err != nil {
		a.log.Warn("health: redis down", "err", err)
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "redis down", "protected": a.protected})
		return
	}
	if err := a.store.Ping(ctx); err != nil {
		a.log.Warn("health: database down", "err", err)
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "db down", "protected": a.protected})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok", "protected": a.protected})
}
