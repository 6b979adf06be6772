package shop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// pendingOrder opens a store in a temporary file with an account of 10000 and a pending
// order of 2500 on it.
func pendingOrder(t *testing.T) (*Store, Account, Order) {
	t.Helper()
	ctx := context.Background()
	s, err := OpenStore(ctx, filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	acct, err := s.CreateAccount(ctx, "alice", 10000)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.CreateOrder(ctx, acct.ID, 2500)
	if err != nil {
		t.Fatal(err)
	}
	return s, acct, o
}

// TestApplyIsAllOrNothing makes the ledger insert fail after the balance and order updates
// ran: the whole write step must roll back, leaving the balance, its version and the order
// as they were, and a later Apply must then go through whole.
func TestApplyIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s, acct, o := pendingOrder(t)
	snap, err := s.ReadBalance(ctx, acct.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	charge := Entry{AccountID: acct.ID, OrderID: o.ID, Kind: KindCharge, Amount: o.Amount}

	if _, err := s.db.ExecContext(ctx, `CREATE TRIGGER ledger_full BEFORE INSERT ON ledger
		BEGIN SELECT RAISE(ABORT, 'disk full'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, snap, charge, StatusPaid); err == nil {
		t.Fatal("Apply succeeded although the ledger insert failed")
	}
	after, err := s.ReadBalance(ctx, acct.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after != snap {
		t.Errorf("after a failed Apply the balance is %+v, want it untouched at %+v", after, snap)
	}
	if got, _ := s.Order(ctx, o.ID); got.Status != StatusPending {
		t.Errorf("after a failed Apply the order is %q, want %q", got.Status, StatusPending)
	}

	if _, err := s.db.ExecContext(ctx, `DROP TRIGGER ledger_full`); err != nil {
		t.Fatal(err)
	}
	balance, err := s.Apply(ctx, snap, charge, StatusPaid)
	if err != nil {
		t.Fatal(err)
	}
	if balance != 7500 {
		t.Errorf("Apply returned balance %d, want 7500", balance)
	}
	after, _ = s.ReadBalance(ctx, acct.ID, 0)
	if after != (Snapshot{Balance: 7500, Version: 1}) {
		t.Errorf("balance after Apply is %+v, want {7500 1}", after)
	}
	if got, _ := s.Order(ctx, o.ID); got.Status != StatusPaid {
		t.Errorf("order after Apply is %q, want %q", got.Status, StatusPaid)
	}
	entries, err := s.Ledger(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].BasedOn != 0 || entries[0].Amount != 2500 || entries[0].Kind != KindCharge {
		t.Errorf("ledger after Apply is %+v, want one charge of 2500 based on version 0", entries)
	}
}

// A holder whose account lock was lost checked that the order was pending before its
// successor claimed the account; the successor may pay the order in between. Under a token,
// Apply moves the order only from the status the caller checked, so the second charge is
// refused (ErrFenced) and the order is charged once. Without a token (the unprotected shop)
// Apply still writes blindly, which is the race the demo shows.
func TestApplyUnderTokenChecksOrderStatus(t *testing.T) {
	ctx := context.Background()
	s, acct, o := pendingOrder(t)
	charge := Entry{AccountID: acct.ID, OrderID: o.ID, Kind: KindCharge, Amount: o.Amount}
	first, err := s.ReadBalance(ctx, acct.ID, 1) // the holder whose lock is then lost
	if err != nil {
		t.Fatal(err)
	}
	// Its successor (token 2) found the order pending; the first holder's write lands now,
	// before the successor claims the account.
	if _, err := s.Apply(ctx, first, charge, StatusPaid); err != nil {
		t.Fatal(err)
	}
	second, err := s.ReadBalance(ctx, acct.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, second, charge, StatusPaid); !errors.Is(err, ErrFenced) {
		t.Fatalf("second charge of a paid order under a newer token: %v, want ErrFenced", err)
	}
	entries, _ := s.Ledger(ctx, acct.ID)
	after, _ := s.ReadBalance(ctx, acct.ID, 0)
	if len(entries) != 1 || after.Balance != 7500 {
		t.Fatalf("ledger %+v, balance %d: want one charge and 7500", entries, after.Balance)
	}

	// Unprotected: no token, no check.
	blind, _ := s.ReadBalance(ctx, acct.ID, 0)
	if _, err := s.Apply(ctx, blind, charge, StatusPaid); err != nil {
		t.Fatalf("blind write: %v", err)
	}
	if entries, _ := s.Ledger(ctx, acct.ID); len(entries) != 2 {
		t.Fatalf("ledger %+v: want the blind second charge", entries)
	}
}

// TestOpenStoreOddPath: the database lands in the file named, whatever its characters. The
// path went into a SQLite URI unescaped: "#" ended it and "?" started its query, so -db
// "odd dir#1/shop?.db" wrote the ledger to "odd dir" while the shop reported the name given,
// and every path sharing the part before "#" shared one ledger.
func TestOpenStoreOddPath(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "odd dir#1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shop?50%.db")
	s, err := OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := s.CreateAccount(ctx, "alice", 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		entries, _ := os.ReadDir(filepath.Dir(dir))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("database file %q: %v; the directory holds %q", path, err, names)
	}
	s, err = OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Account(ctx, acct.ID); err != nil {
		t.Errorf("account after reopening %q: %v", path, err)
	}
}
