package storm

import (
	"context"
	"math"
	"net/http"
	"slices"
	"time"
)

// Report is what one storm found. Every figure comes from the shop's answers, its ledger
// and its balances as read after the storm.
type Report struct {
	// Config is the storm's configuration, defaults filled in.
	Config Config
	// Protected is what the shop's /healthz said.
	Protected bool
	// Elapsed is the wall time of the whole run, set-up and drain included.
	Elapsed time.Duration

	// Duplicate pays of one order.
	PayAnswers   map[int]int // status code (0: no response) -> count
	RetryAnswers map[int]int // the retries sent one per key after the burst
	PayReplayed  int         // answers (burst and retries) marked Idempotent-Replayed
	// RetryReplayed counts the retries answered 200 and marked Idempotent-Replayed: the
	// paying key's stored answer, which a protected shop gives back exactly once.
	RetryReplayed int
	OrdersPaid    int     // orders of the pay phase in status paid afterwards (0 or 1)
	Charges       int     // charge entries for that order in the ledger
	PayBalance    Balance // the paying account
	PayLatency    Percentiles

	// Withdrawals and refunds.
	WithdrawAnswers map[int]int
	RefundAnswers   map[int]int
	RefundOrders    int // orders paid at set-up for the refund requests
	RefundsWanted   int // distinct orders whose refund was accepted (202)
	RefundsApplied  int // refund entries in the ledgers
	// RefundMismatches counts the orders of the refund phase whose outcome is wrong: an
	// accepted refund not applied exactly once (no refund entry, or several), or the order
	// not "refunded"; an order whose refunds were all refused that got a refund entry
	// anyway.
	RefundMismatches int
	StormBalance     Balance // summed over the storm accounts
	StormLatency     Percentiles
	Archived         int // refund tasks the worker gave up on

	// Over every account of the run.
	LostUpdates         int // entries computed from a balance version another entry already used
	BalanceMismatches   int // accounts whose final balance is not the expected one
	InconsistentLedgers int // accounts whose ledger does not add up to their balance
}

// Balance is an expected balance (from the opening balance and the accepted operations)
// and the final one the shop reports, in cents.
type Balance struct {
	Expected, Final int64
}

// Percentiles of request latency (nearest rank).
type Percentiles struct {
	P50, P99 time.Duration
}

// LedgerConsistent reports whether every account's ledger adds up to its balance.
func (r *Report) LedgerConsistent() bool { return r.InconsistentLedgers == 0 }

// Anomalies lists every way the run deviates from a correct shop, one line each, with
// its count; nil means none.
func (r *Report) Anomalies() []Anomaly {
	var out []Anomaly
	add := func(n int, what string) {
		if n != 0 {
			out = append(out, Anomaly{Count: n, What: what})
		}
	}
	add(r.Charges-r.OrdersPaid, "charges beyond one per paid order")
	add(r.OrdersPaid-1, "duplicate-pay order left unpaid (no pay went through)")
	add(r.RefundsApplied-r.RefundsWanted, "refunds applied beyond one per refunded order")
	add(r.RefundMismatches, "orders whose refund is not applied exactly once, or not marked refunded")
	add(r.RefundsWanted-r.RefundOrders, "orders whose every refund request was refused")
	add(r.Archived, "refund tasks given up")
	add(r.LostUpdates, "lost balance updates")
	add(r.BalanceMismatches, "accounts whose balance is not the expected one")
	add(r.InconsistentLedgers, "accounts whose ledger does not add up to the balance")
	add(unexpected(r.PayAnswers, http.StatusOK, http.StatusConflict), "pay answers other than 200 or 409")
	add(unexpected(r.RetryAnswers, http.StatusOK, http.StatusConflict), "pay retries answered other than 200 or 409")
	if r.Protected && r.OrdersPaid == 1 {
		// The key that paid is retried once: a protected shop replays its stored 200.
		add(r.RetryReplayed-1, "retries of the paying key not answered with its stored 200 (replayed)")
	}
	add(unexpected(r.WithdrawAnswers, http.StatusOK), "withdraw answers other than 200")
	add(unexpected(r.RefundAnswers, http.StatusAccepted, http.StatusConflict), "refund answers other than 202 or 409")
	return out
}

// Anomaly is one kind of deviation and how often it happened (negative: that many too few).
type Anomaly struct {
	Count int
	What  string
}

// Clean reports whether the run shows no anomaly. The anomalies are not summed: their counts
// are of different things (ledger entries, orders, accounts, answers).
func (r *Report) Clean() bool { return len(r.Anomalies()) == 0 }

// unexpected counts the answers whose status is not in ok.
func unexpected(answers map[int]int, ok ...int) int {
	n := 0
	for status, c := range answers {
		if !slices.Contains(ok, status) {
			n += c
		}
	}
	return n
}

// measure fills r from the answers and from the shop's state after the storm.
func (s *storm) measure(ctx context.Context, r *Report, payer account, payOrder order, accts []account, pays, retries, withdrawals, refunds []*op) error {
	r.PayAnswers, r.WithdrawAnswers, r.RefundAnswers = tally(pays), tally(withdrawals), tally(refunds)
	r.RetryAnswers = tally(retries)
	r.PayLatency = percentiles(pays)
	r.StormLatency = percentiles(append(slices.Clone(withdrawals), refunds...))

	// Duplicate pays: one order, so at most one charge may exist.
	anyPaid := false
	for _, o := range append(slices.Clone(pays), retries...) {
		anyPaid = anyPaid || o.ans.status == http.StatusOK
		if o.ans.replayed {
			r.PayReplayed++
		}
	}
	for _, o := range retries {
		if o.ans.status == http.StatusOK && o.ans.replayed {
			r.RetryReplayed++
		}
	}
	var o order
	if err := s.api.expect(ctx, "GET", "/api/orders/"+payOrder.ID, nil, nil, http.StatusOK, &o); err != nil {
		return err
	}
	if o.Status == "paid" {
		r.OrdersPaid = 1
	}
	expected := int64(payBalance)
	if anyPaid {
		expected -= payAmount
	}
	entries, bal, err := s.account(ctx, r, payer.ID, payBalance, expected)
	if err != nil {
		return err
	}
	r.PayBalance = bal
	for _, e := range entries {
		if e.Kind == "charge" && e.OrderID == payOrder.ID {
			r.Charges++
		}
	}

	// Storm accounts: opening balance, less the orders paid at set-up and the accepted
	// withdrawals, plus one refund per order whose refund was accepted.
	want := make([]int64, len(accts))
	for i := range want {
		want[i] = stormBalance - int64(s.cfg.RefundOrders)*refundAmount
	}
	for _, o := range withdrawals {
		if o.ans.status == http.StatusOK {
			want[o.acct] -= o.amount
		}
	}
	refunded, orders := map[string]bool{}, map[string]bool{}
	for _, o := range refunds {
		orders[o.order] = true
		if o.ans.status == http.StatusAccepted && !refunded[o.order] {
			refunded[o.order] = true
			want[o.acct] += o.amount
		}
	}
	r.RefundOrders, r.RefundsWanted = len(orders), len(refunded)
	perOrder := map[string]int{}
	for i, a := range accts {
		entries, bal, err := s.account(ctx, r, a.ID, stormBalance, want[i])
		if err != nil {
			return err
		}
		r.StormBalance.Expected += bal.Expected
		r.StormBalance.Final += bal.Final
		for _, e := range entries {
			if e.Kind == "refund" {
				r.RefundsApplied++
				perOrder[e.OrderID]++
			}
		}
	}
	// Per order, not only in total: one order credited twice and another never would
	// balance out in the totals.
	for id := range orders {
		var o order
		if err := s.api.expect(ctx, "GET", "/api/orders/"+id, nil, nil, http.StatusOK, &o); err != nil {
			return err
		}
		switch {
		case refunded[id] && (perOrder[id] != 1 || o.Status != "refunded"):
			r.RefundMismatches++
		case !refunded[id] && perOrder[id] != 0:
			r.RefundMismatches++
		}
	}
	return nil
}

// account reads an account's balance and ledger after the storm and counts, into r, its
// lost updates, a balance other than expected, and a ledger that does not add up.
func (s *storm) account(ctx context.Context, r *Report, id string, opening, expected int64) ([]entry, Balance, error) {
	var a account
	if err := s.api.expect(ctx, "GET", "/api/accounts/"+id, nil, nil, http.StatusOK, &a); err != nil {
		return nil, Balance{}, err
	}
	var entries []entry
	if err := s.api.expect(ctx, "GET", "/api/accounts/"+id+"/ledger", nil, nil, http.StatusOK, &entries); err != nil {
		return nil, Balance{}, err
	}
	sum, used := opening, map[int64]bool{}
	for _, e := range entries {
		sum += e.signed()
		if used[e.BasedOn] {
			r.LostUpdates++ // a second write computed from the same balance overwrote the first
		}
		used[e.BasedOn] = true
	}
	if sum != a.Balance {
		r.InconsistentLedgers++
	}
	if expected != a.Balance {
		r.BalanceMismatches++
	}
	return entries, Balance{Expected: expected, Final: a.Balance}, nil
}

// tally counts answers by status.
func tally(ops []*op) map[int]int {
	m := map[int]int{}
	for _, o := range ops {
		m[o.ans.status]++
	}
	return m
}

// percentiles returns the nearest-rank p50 and p99 of the ops' latencies.
func percentiles(ops []*op) Percentiles {
	if len(ops) == 0 {
		return Percentiles{}
	}
	d := make([]time.Duration, len(ops))
	for i, o := range ops {
		d[i] = o.ans.took
	}
	slices.Sort(d)
	rank := func(p float64) time.Duration { return d[int(math.Ceil(p*float64(len(d))))-1] }
	return Percentiles{P50: rank(0.50), P99: rank(0.99)}
}
