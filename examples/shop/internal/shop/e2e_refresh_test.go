//go:build e2e

package shop_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
)

// The page's reads (GET /api/...) as a test sets them: answered by the shop, 503 as with
// Redis down, 500, or cut (the connection closed without an answer).
const (
	readsServed int32 = iota
	reads503
	reads500
	readsCut
)

// faultyReads serves h, except GET /api/ requests, which it answers as *mode says.
func faultyReads(h http.Handler, mode *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/api/") {
			h.ServeHTTP(w, r)
			return
		}
		switch mode.Load() {
		case reads503:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"unavailable"}`))
		case reads500:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":"internal"}`))
		case readsCut:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // a reset, not a clean close
				}
				_ = conn.Close()
			}
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// TestE2EPageShowsFailedRefresh: when the reads after a click fail (503, 500, or no answer
// at all), the page says so in its error line and keeps the last values it had, struck
// through, instead of drawing "undefined" or an empty ledger; the next Pay still pays the
// same order, and the first successful refresh clears the error. Before, refresh() took any
// answer as the order: a 503's {"error":...} replaced the order (the next Pay went to
// /api/orders/undefined/pay), the status and balance went blank, the ledger emptied, and a
// network failure left an unhandled rejection with nothing on the page.
func TestE2EPageShowsFailedRefresh(t *testing.T) {
	e := newEnv(t, true, 20*time.Millisecond)
	var mode atomic.Int32
	srv := httptest.NewServer(faultyReads(e.h, &mode))
	t.Cleanup(srv.Close)

	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("create")),
		chromedp.Click(chromedp.ID("create")),
		chromedp.WaitVisible(chromedp.ID("pay")),
		chromedp.Poll[chromedp.Void](`document.getElementById("status").textContent === "pending"`, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatal(err)
	}
	orderID, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("order-id")))
	if err != nil {
		t.Fatal(err)
	}
	accountID, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("account-id")))
	if err != nil {
		t.Fatal(err)
	}

	for i, c := range []struct {
		name string
		mode int32
		want string // in the error line
	}{
		{"503", reads503, "order: 503 unavailable"},
		{"500", reads500, "ledger: 500 internal"},
		{"cut", readsCut, "balance: network error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(document.querySelectorAll("#ledger tr").length)`))
			if err != nil {
				t.Fatal(err)
			}
			mode.Store(c.mode)
			clicks := i + 1
			err = chromedp.Do(ctx,
				chromedp.Click(chromedp.ID("pay")),
				chromedp.Poll[chromedp.Void](`(document.getElementById("responses").textContent.match(/^click \d+: \d{3}/gm) || []).length === `+strconv.Itoa(clicks),
					chromedp.WithPollingTimeout(10*time.Second)),
			)
			if err != nil {
				log, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("responses")))
				t.Fatalf("click %d not answered: %v\nresponses:\n%s", clicks, err, log)
			}
			_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](
				`(l => l !== null && !l.hidden && l.textContent.includes(`+strconv.Quote(c.want)+`))(document.getElementById("refresh-error"))`,
				chromedp.WithPollingTimeout(5*time.Second)))
			if err != nil {
				line, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(l => l === null ? "(none)" : l.textContent)(document.getElementById("refresh-error"))`))
				t.Errorf("the page does not report the failed refresh (want %q in its error line): %v; error line: %q", c.want, err, line)
			}
			shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[
				document.getElementById("status").textContent, document.getElementById("status").className,
				document.getElementById("balance").textContent, document.getElementById("balance").className,
				String(document.querySelectorAll("#ledger tr").length), document.getElementById("ledger").className]`))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("status %q (%s), balance %q (%s), %s ledger rows (%s)", shown[0], shown[1], shown[2], shown[3], shown[4], shown[5])
			for _, v := range []string{shown[0], shown[2]} {
				if v == "" || strings.Contains(v, "undefined") {
					t.Errorf("after a failed refresh the page shows status %q, balance %q: want the last values read", shown[0], shown[2])
					break
				}
			}
			if !strings.Contains(shown[1], "stale") || !strings.Contains(shown[3], "stale") || !strings.Contains(shown[5], "stale") {
				t.Errorf("the values of a failed refresh are not marked stale: status %q, balance %q, ledger %q", shown[1], shown[3], shown[5])
			}
			if shown[4] != rows {
				t.Errorf("a failed refresh redrew the ledger: %s rows, it had %s", shown[4], rows)
			}
		})
	}

	// The reads work again: the next Pay pays the same order (its answer replayed) and the
	// refresh after it clears the error line and the marks.
	mode.Store(readsServed)
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("pay")),
		chromedp.Poll[chromedp.Void](`(l => l !== null && l.hidden)(document.getElementById("refresh-error")) && document.getElementById("status").textContent === "paid" && document.querySelectorAll(".stale").length === 0`,
			chromedp.WithPollingTimeout(10*time.Second)),
	)
	log, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("responses")))
	t.Logf("page responses:\n%s", log)
	if err != nil {
		t.Fatalf("the page did not recover once the reads worked again: %v", err)
	}
	if !strings.Contains(log, `"order_id":"`+orderID+`"`) || strings.Contains(log, "undefined") {
		t.Errorf("the pays did not all go to order %s:\n%s", orderID, log)
	}
	if got := count(e.ledger(accountID), shop.KindCharge); got != 1 {
		t.Errorf("charges: %d, want 1", got)
	}
}
