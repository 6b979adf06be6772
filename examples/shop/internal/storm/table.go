package storm

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteTable prints the reports side by side, one column each, headed "protected" or
// "unprotected", followed by the anomalies of each run.
func WriteTable(w io.Writer, reports ...*Report) error {
	if len(reports) == 0 {
		return nil
	}
	c := reports[0].Config
	type row struct {
		label string
		cell  func(r *Report) string
	}
	section := func(title string) row { return row{label: title} }
	rows := []row{
		section(fmt.Sprintf("%d concurrent pays of one order (%d Idempotency-Keys)", c.Pays, c.PayKeys)),
		{"answers", func(r *Report) string { return statuses(r.PayAnswers) }},
		{"retries, one per key", func(r *Report) string { return statuses(r.RetryAnswers) }},
		{"replayed answers", func(r *Report) string { return fmt.Sprint(r.PayReplayed) }},
		{"orders paid", func(r *Report) string { return fmt.Sprint(r.OrdersPaid) }},
		{"charges applied", func(r *Report) string { return fmt.Sprint(r.Charges) }},
		{"balance expected / final", func(r *Report) string { return balance(r.PayBalance) }},
		{"latency p50 / p99", func(r *Report) string { return latency(r.PayLatency) }},
		section(fmt.Sprintf("%d withdrawals over %d accounts + %d refund requests (%d orders)",
			c.Withdrawals, c.Accounts, c.Accounts*c.RefundOrders*c.RefundCopies, c.Accounts*c.RefundOrders)),
		{"withdraw answers", func(r *Report) string { return statuses(r.WithdrawAnswers) }},
		{"refund answers", func(r *Report) string { return statuses(r.RefundAnswers) }},
		{"refunds applied / orders", func(r *Report) string { return fmt.Sprintf("%d / %d", r.RefundsApplied, r.RefundsWanted) }},
		{"balance expected / final", func(r *Report) string { return balance(r.StormBalance) }},
		{"latency p50 / p99", func(r *Report) string { return latency(r.StormLatency) }},
		section("all accounts"),
		{"lost updates", func(r *Report) string { return fmt.Sprint(r.LostUpdates) }},
		{"ledger consistent", func(r *Report) string {
			if r.LedgerConsistent() {
				return "yes"
			}
			return fmt.Sprintf("no (%d of %d accounts)", r.InconsistentLedgers, r.Config.Accounts+1)
		}},
		{"kinds of anomaly", func(r *Report) string { return fmt.Sprint(len(r.Anomalies())) }},
	}

	const labelWidth = 30
	width := 24
	for _, r := range rows {
		if r.cell == nil {
			continue
		}
		for _, rep := range reports {
			width = max(width, len(r.cell(rep))+2)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s", labelWidth, "")
	for _, rep := range reports {
		fmt.Fprintf(&b, "%-*s", width, mode(rep))
	}
	b.WriteString("\n")
	for _, r := range rows {
		if r.cell == nil {
			fmt.Fprintf(&b, "%s\n", r.label)
			continue
		}
		fmt.Fprintf(&b, "  %-*s", labelWidth-2, r.label)
		for _, rep := range reports {
			fmt.Fprintf(&b, "%-*s", width, r.cell(rep))
		}
		b.WriteString("\n")
	}
	for _, rep := range reports {
		list := rep.Anomalies()
		if len(list) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nanomalies, %s:\n", mode(rep))
		for _, a := range list {
			fmt.Fprintf(&b, "  %5d  %s\n", a.Count, a.What)
		}
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

// mode names the column of a report.
func mode(r *Report) string {
	if r.Protected {
		return "protected"
	}
	return "unprotected"
}

// statuses renders answer counts by status, e.g. "200×3 409×47"; status 0 is "err".
func statuses(m map[int]int) string {
	codes := make([]int, 0, len(m))
	for code := range m {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	parts := make([]string, 0, len(codes))
	for _, code := range codes {
		name := fmt.Sprint(code)
		if code == 0 {
			name = "err"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, m[code]))
	}
	return strings.Join(parts, " ")
}

// balance renders expected and final cents, marking a mismatch.
func balance(b Balance) string {
	s := fmt.Sprintf("%d / %d", b.Expected, b.Final)
	if b.Expected != b.Final {
		s += " ✗"
	}
	return s
}

// latency renders percentiles in milliseconds.
func latency(p Percentiles) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	return ms(p.P50) + " / " + ms(p.P99)
}
