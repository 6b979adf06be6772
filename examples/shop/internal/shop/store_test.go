package shop

import (
	"context"
	"path/filepath"
	"testing"
)

// TestApplyIsAllOrNothing makes the ledger insert fail after the balance and order updates
// ran: the whole write step must roll back, leaving the balance, its version and the order
// as they were, and a later Apply must then go through whole.
func TestApplyIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s, err := OpenStore(ctx, filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acct, err := s.CreateAccount(ctx, "alice", 10000)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.CreateOrder(ctx, acct.ID, 2500)
	if err != nil {
		t.Fatal(err)
	}
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
