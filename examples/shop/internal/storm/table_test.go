package storm

import (
	"strings"
	"testing"
	"time"
)

func TestWriteTable(t *testing.T) {
	cfg := Config{}.withDefaults()
	bad := &Report{
		Config: cfg, PayAnswers: map[int]int{200: 50}, OrdersPaid: 1, Charges: 50,
		PayBalance:      Balance{Expected: 7500, Final: 7500},
		WithdrawAnswers: map[int]int{200: 199, 0: 1}, RefundAnswers: map[int]int{202: 24},
		RefundOrders: 12, RefundsWanted: 12, RefundsApplied: 15, RefundMismatches: 2, LostUpdates: 7, InconsistentLedgers: 2, BalanceMismatches: 1,
		PayLatency: Percentiles{P50: 40 * time.Millisecond, P99: 60 * time.Millisecond},
	}
	good := &Report{Config: cfg, Protected: true, PayAnswers: map[int]int{200: 1, 409: 49}, OrdersPaid: 1, Charges: 1,
		RetryAnswers: map[int]int{200: 1, 409: 4}, RetryReplayed: 1}
	var b strings.Builder
	if err := WriteTable(&b, bad, good); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"unprotected", "protected",
		"50 concurrent pays of one order (5 Idempotency-Keys)",
		"200×50", "200×1 409×49", "err×1 200×199",
		"40 ms / 60 ms",
		"no (2 of 5 accounts)", "yes",
		"49  charges beyond one per paid order",
		"3  refunds applied beyond one per refunded order",
		"7  lost balance updates",
		"1  withdraw answers other than 200",
		"2  orders whose refund is not applied exactly once, or not marked refunded",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if got := len(bad.Anomalies()); bad.Clean() || got != 7 {
		t.Errorf("bad report: Clean %v, %d kinds of anomaly, want 7: %+v", bad.Clean(), got, bad.Anomalies())
	}
	if !good.Clean() {
		t.Errorf("good report has anomalies: %+v", good.Anomalies())
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("trailing space in %q", line)
		}
	}
}
