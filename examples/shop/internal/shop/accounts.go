package shop

import (
	"context"
	"fmt"
	"time"
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
//
// Fence is the fencing token of the account lock the snapshot was read under (0 without
// one); Apply writes only while the account still carries that token.
type Snapshot struct {
	Balance int64
	Version int64
	Fence   int64
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

// ReadBalance is the first step of a balance change: it reads the balance and its version,
// or returns ErrNotFound.
//
// fence is the fencing token of the account lock the caller holds (dlock's Lock.Token), or
// 0 without a lock. With one, the read first claims the account for that token: it stores
// the token unless the account already carries a higher one (ErrFenced). A holder whose lock
// was lost, and taken by someone else with a higher token, can then neither read nor write
// the account again, even while it still believes it holds the lock: it cannot overwrite
// the newer holder's balance, nor can the newer holder read a balance it is about to change.
func (s *Store) ReadBalance(ctx context.Context, accountID string, fence int64) (Snapshot, error) {
	if fence > 0 {
		res, err := s.db.ExecContext(ctx,
			`UPDATE accounts SET fence = ? WHERE id = ? AND fence <= ?`, fence, accountID, fence)
		if err != nil {
			return Snapshot{}, fmt.Errorf("shop: claim %s: %w", accountID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if _, err := s.Account(ctx, accountID); err != nil {
				return Snapshot{}, err
			}
			return Snapshot{}, fmt.Errorf("shop: balance of %s under token %d: %w", accountID, fence, ErrFenced)
		}
	}
	sn := Snapshot{Fence: fence}
	err := s.db.QueryRowContext(ctx,
		`SELECT balance, version FROM accounts WHERE id = ?`, accountID).Scan(&sn.Balance, &sn.Version)
	if err != nil {
		return Snapshot{}, fmt.Errorf("shop: balance of %s: %w", accountID, notFound(err))
	}
	return sn, nil
}

// statusBefore is the status an order must have for Apply to move it to the key's status.
var statusBefore = map[string]string{StatusPaid: StatusPending, StatusRefunded: StatusPaid}

// Apply is the last step of a balance change: it writes the balance computed from the
// snapshot read earlier (blindly, whatever happened since, as naive code does, unless the
// snapshot was read under a fencing token: then only while the account still carries that
// token, else ErrFenced), sets the order's status when status is not empty, and appends e
// to the ledger, stamped now. Under a token the order must still have the status the caller
// checked before it (statusBefore), else ErrFenced: a holder whose lock was lost checked
// "pending" before its successor claimed the account, and the successor may have paid the
// order since; the token alone protects the balance, not that check.
//
// The three writes are one transaction. The race the demo shows lies between the read and
// this write, where the provider call sits; a crash or a cancelled request here must not
// leave a balance changed without its ledger entry, so the write step cannot be torn.
// The entry's BasedOn and At are stamped here (from.Version and now); balance is the new one.
func (s *Store) Apply(ctx context.Context, from Snapshot, e Entry, status string) (balance int64, err error) {
	balance = from.Balance + e.Signed()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("shop: apply %s to %s: %w", e.Kind, e.AccountID, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx,
		`UPDATE accounts SET balance = ?, version = ? WHERE id = ? AND (? = 0 OR fence = ?)`,
		balance, from.Version+1, e.AccountID, from.Fence, from.Fence)
	if err != nil {
		return 0, fmt.Errorf("shop: write balance of %s: %w", e.AccountID, err)
	}
	if n, rerr := res.RowsAffected(); rerr != nil || n == 0 {
		err = fmt.Errorf("shop: write balance of %s under token %d: %w", e.AccountID, from.Fence, ErrFenced)
		return 0, err
	}
	if status != "" {
		before := statusBefore[status]
		res, err = tx.ExecContext(ctx, `UPDATE orders SET status = ? WHERE id = ? AND (? = 0 OR status = ?)`,
			status, e.OrderID, from.Fence, before)
		if err != nil {
			return 0, fmt.Errorf("shop: set status of order %s: %w", e.OrderID, err)
		}
		if n, rerr := res.RowsAffected(); rerr != nil || n == 0 {
			err = fmt.Errorf("shop: order %s is no longer %s under token %d: %w", e.OrderID, before, from.Fence, ErrFenced)
			return 0, err
		}
	}
	if _, err = tx.ExecContext(ctx,
		`INSERT INTO ledger (account_id, order_id, kind, amount, based_on, at) VALUES (?, ?, ?, ?, ?, ?)`,
		e.AccountID, e.OrderID, e.Kind, e.Amount, from.Version, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return 0, fmt.Errorf("shop: append %s to ledger of %s: %w", e.Kind, e.AccountID, err)
	}
	if err = tx.Commit(); err != nil {
		return 0, fmt.Errorf("shop: apply %s to %s: %w", e.Kind, e.AccountID, err)
	}
	return balance, nil
}
