package shop

import (
	"context"
	"fmt"
)

// Order statuses.
const (
	StatusPending  = "pending"
	StatusPaid     = "paid"
	StatusRefunded = "refunded"
)

// Order is a purchase to be paid from one account; Amount is in integer cents.
type Order struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	Amount    int64  `json:"amount"`
	Status    string `json:"status"`
}

// CreateOrder inserts a pending order; it returns ErrNotFound when the account does not exist.
func (s *Store) CreateOrder(ctx context.Context, accountID string, amount int64) (Order, error) {
	if _, err := s.Account(ctx, accountID); err != nil {
		return Order{}, err
	}
	o := Order{ID: newID("ord"), AccountID: accountID, Amount: amount, Status: StatusPending}
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO orders (id, account_id, amount, status) VALUES (?, ?, ?, ?)`,
		o.ID, o.AccountID, o.Amount, o.Status)
	if err != nil {
		return Order{}, fmt.Errorf("shop: create order: %w", err)
	}
	return o, nil
}

// Order returns the order with id, or ErrNotFound.
func (s *Store) Order(ctx context.Context, id string) (Order, error) {
	var o Order
	err := s.db.QueryRowContext(ctx,
		`SELECT id, account_id, amount, status FROM orders WHERE id = ?`, id).
		Scan(&o.ID, &o.AccountID, &o.Amount, &o.Status)
	if err != nil {
		return Order{}, fmt.Errorf("shop: order %s: %w", id, notFound(err))
	}
	return o, nil
}
