package shop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// TaskRefund is the asynq task type of a refund; its payload is RefundPayload as JSON.
const TaskRefund = "shop:refund"

// refundQueue is the asynq queue refunds go through.
const refundQueue = "refunds"

// RefundPayload is the payload of a TaskRefund task. AccountID is carried so the worker's
// lock key (account:{account_id}) is derived from the payload alone, without a database
// read before the lock is taken.
type RefundPayload struct {
	OrderID   string `json:"order_id"`
	AccountID string `json:"account_id"`
	Amount    int64  `json:"amount"`
}

// newRefundTask builds the refund task of an order. It sets no asynq.TaskID or
// asynq.Unique on purpose: a user who clicks Refund twice enqueues two tasks, and the
// queue may deliver one task twice, so the worker itself must apply a refund once.
func newRefundTask(o Order) (*asynq.Task, error) {
	b, err := json.Marshal(RefundPayload{OrderID: o.ID, AccountID: o.AccountID, Amount: o.Amount})
	if err != nil {
		return nil, fmt.Errorf("shop: refund payload: %w", err)
	}
	return asynq.NewTask(TaskRefund, b, asynq.Queue(refundQueue), asynq.MaxRetry(10)), nil
}

// handleRefund credits the account of a paid order and marks it refunded, in the same
// naive steps as the HTTP handlers: check the status, read the balance, call the provider,
// write the balance, mark the order, append the refund. Protected, the account:{id} lock
// serializes it with the HTTP routes and a done marker per order stops a second run.
func (a *App) handleRefund(ctx context.Context, t *asynq.Task) error {
	var p RefundPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.OrderID == "" {
		return fmt.Errorf("shop: bad refund payload %q: %w", t.Payload(), asynq.SkipRetry)
	}
	o, err := a.store.Order(ctx, p.OrderID)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		return err
	}
	if p.AccountID != o.AccountID {
		// The lock was taken on the payload's account; the money moves on the order's.
		// Applying it would change a balance under another account's lock.
		return fmt.Errorf("shop: refund payload names account %q, order %s belongs to %q: %w",
			p.AccountID, o.ID, o.AccountID, asynq.SkipRetry)
	}
	if o.Status != StatusPaid {
		return nil // refunded already (or never paid): nothing to do
	}
	snap, err := a.store.ReadBalance(ctx, o.AccountID, fence(ctx))
	if err != nil {
		return err
	}
	if err := a.provider.Call(ctx); err != nil {
		return err
	}
	_, err = a.store.Apply(ctx, snap, Entry{AccountID: o.AccountID, OrderID: o.ID, Kind: KindRefund, Amount: o.Amount}, StatusRefunded)
	return err
}
