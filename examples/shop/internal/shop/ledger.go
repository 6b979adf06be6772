package shop

import (
	"context"
	"fmt"
	"time"
)

// Ledger entry kinds. Charges and withdrawals take Amount from the balance, refunds add it.
const (
	KindCharge   = "charge"
	KindWithdraw = "withdraw"
	KindRefund   = "refund"
)

// Entry is one ledger row: a balance change applied to an account.
type Entry struct {
	AccountID string    `json:"-"`
	OrderID   string    `json:"order_id"` // empty for withdrawals
	Kind      string    `json:"kind"`
	Amount    int64     `json:"amount"`
	BasedOn   int64     `json:"based_on"` // the balance version the write was computed from
	At        time.Time `json:"at"`
}

// Signed returns the entry's effect on the balance: negative for charges and withdrawals.
func (e Entry) Signed() int64 {
	if e.Kind == KindRefund {
		return e.Amount
	}
	return -e.Amount
}

// Ledger returns the entries of an account, oldest first, or ErrNotFound for an unknown account.
func (s *Store) Ledger(ctx context.Context, accountID string) ([]Entry, error) {
	if _, err := s.Account(ctx, accountID); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx,
		`SELECT order_id, kind, amount, based_on, at FROM ledger WHERE account_id = ? ORDER BY seq`, accountID)
	if err != nil {
		return nil, fmt.Errorf("shop: ledger of %s: %w", accountID, err)
	}
	defer rows.Close()
	entries := []Entry{}
	for rows.Next() {
		e := Entry{AccountID: accountID}
		var at string
		if err := rows.Scan(&e.OrderID, &e.Kind, &e.Amount, &e.BasedOn, &at); err != nil {
			return nil, fmt.Errorf("shop: ledger of %s: %w", accountID, err)
		}
		if e.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, fmt.Errorf("shop: ledger of %s: bad time %q: %w", accountID, at, err)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shop: ledger of %s: %w", accountID, err)
	}
	return entries, nil
}
