package storm_test

import (
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/examples/shop/internal/shoptest"
	"github.com/lockguard/lockguard/examples/shop/internal/storm"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// small is the demo's storm at a size that runs in seconds under -race.
var small = storm.Config{Pays: 20, PayKeys: 4, Accounts: 2, Withdrawals: 40, RefundOrders: 2, RefundCopies: 2}

// run starts a shop on its own Redis and database and storms it.
func run(t *testing.T, unprotected bool) *storm.Report {
	t.Helper()
	return stormAt(t, shoptest.Start(t, unprotected).URL)
}

// stormAt runs the small storm against the shop at url and logs its table.
func stormAt(t *testing.T, url string) *storm.Report {
	t.Helper()
	cfg := small
	cfg.BaseURL = url
	r, err := storm.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_ = storm.WriteTable(&b, r)
	t.Logf("\n%s", b.String())
	return r
}

// TestProtectedStormHasNoAnomaly is the demo's promise: with the locks, the storm finds
// nothing wrong.
func TestProtectedStormHasNoAnomaly(t *testing.T) {
	r := run(t, false)
	if !r.Protected {
		t.Fatal("the shop reports unprotected")
	}
	if list := r.Anomalies(); len(list) > 0 {
		t.Errorf("protected storm: %+v", list)
	}
	// The counters must have seen the work, or zero anomalies would mean nothing.
	if r.Charges != 1 || r.OrdersPaid != 1 || r.RefundsApplied != 4 || r.WithdrawAnswers[200] != 40 {
		t.Errorf("protected storm did not do the work: %+v", r)
	}
	// The retry with the key that paid gets the stored answer back.
	if r.RetryAnswers[200] < 1 || r.PayReplayed < r.RetryAnswers[200] {
		t.Errorf("retries after the burst: %v, %d replayed; want the paying key's answer replayed", r.RetryAnswers, r.PayReplayed)
	}
}

// TestUnprotectedStormShowsAnomalies shows the demo is not rigged: the same storm on the
// same shop without locks finds double charges and lost updates.
func TestUnprotectedStormShowsAnomalies(t *testing.T) {
	r := run(t, true)
	if r.Protected {
		t.Fatal("the shop reports protected")
	}
	if r.Charges <= 1 {
		t.Errorf("unprotected: %d charges for one order, want duplicates", r.Charges)
	}
	if r.LostUpdates == 0 {
		t.Error("unprotected: no lost update found")
	}
	if r.LedgerConsistent() {
		t.Error("unprotected: ledger reported consistent")
	}
	if r.Clean() {
		t.Error("unprotected: no anomaly")
	}
}
