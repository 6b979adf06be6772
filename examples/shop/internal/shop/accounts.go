package shop

import (
	"context"
	"fmt"
)

// Account is a customer account; Balance is in integer cents.
type Account struct {
	ID      string `json:"id"`
	Owner   string `json:"owner"`
	Balance int64  `json:"balance"`
}

// Snapshot is a balance as read at one moment, with the version it had then. Every write
// of a balance stores the version it was computed from plus one, and the ledger entry of
// the write records the version it was based on: two entries based on the same version
// are a lost update, countable from the database alone.
type Snapshot struct {
	Balance int64
	Version int64
}

// CreateAccount inserts a new account with an opening balance.
func (s *Store) CreateAccount(ctx context.Context, owner string, balance int64) (Account, error) {
	a := Account{ID: newID("acc"), Owner: owner, Balance: balance}
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)`, a.ID, a.Owner, a.Balance)
	if err != nil {
		return Account{}, fmt.Errorf("shop: create account: %w", err)
	}
	return a, nil
}

// Account returns the account with id, or ErrNotFound.
func (s *Store) Account(ctx context.Context, id string) (Account, error) {
	var a Account
	err := s.db.QueryRowContext(ctx,
		`SELECT id, owner, balance FROM accounts WHERE id = ?`, id).Scan(&a.ID, &a.Owner, &a.Balance)
	if err != nil {
		return Account{}, fmt.Errorf("shop: account %s: %w", id, notFound(err))
	}
	return a, nil
}

// ReadBalance is the first step of a naive balance change: it reads the balance and its
// version, or returns ErrNotFound.
func (s *Store) ReadBalance(ctx context.Context, accountID string) (Snapshot, error) {
	var sn Snapshot
	err := s.db.QueryRowContext(ctx,
		`SELECT balance, version FROM accounts WHERE id = ?`, accountID).Scan(&sn.Balance, &sn.Version)
	if err != nil {
		return Snapshot{}, fmt.Errorf("shop: balance of %s: %w", accountID, notFound(err))
	}
	return sn, nil
}

// WriteBalance is the second step: it overwrites the balance with a value computed from
// the snapshot read earlier, whatever happened since (a blind write, as naive code does).
func (s *Store) WriteBalance(ctx context.Context, accountID string, from Snapshot, balance int64) error {
	_, err := s.db.ExecContext(ctx,
		`UPDATE accounts SET balance = ?, version = ? WHERE id = ?`, balance, from.Version+1, accountID)
	if err != nil {
		return fmt.Errorf("shop: write balance of %s: %w", accountID, err)
	}
	return nil
}
