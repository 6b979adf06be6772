//go:build e2e

package shop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/examples/shop/internal/shoptest"
)

// TestE2EDoubleClickPay opens the shop's page in headless Chromium, creates an order,
// double-clicks Pay, and checks that the protected page shows "paid" and the ledger exactly
// one charge, on the page and through the API. The unprotected shop gets the same clicks; its
// charges are logged, not asserted (two, whenever the clicks land within the provider's
// latency), to show what the locks prevent.
//
// It needs Debian's chromium package (`make e2e` installs it); CHROME_BIN overrides the
// browser. Set SHOP_SCREENSHOT_DIR to keep shop.png and shop-unprotected.png of the final
// pages.
func TestE2EDoubleClickPay(t *testing.T) {
	for _, unprotected := range []bool{false, true} {
		name, shot := "protected", "shop.png"
		if unprotected {
			name, shot = "unprotected", "shop-unprotected.png"
		}
		t.Run(name, func(t *testing.T) {
			charges, pageCharges := doubleClickPay(t, unprotected, shot)
			switch {
			case !unprotected && (charges != 1 || pageCharges != 1):
				t.Errorf("ledger has %d charges, page shows %d; want exactly 1", charges, pageCharges)
			case unprotected:
				t.Logf("unprotected: a double-click made %d charges", charges)
			}
		})
	}
}

// doubleClickPay runs the page scenario against a fresh shop and returns the number of
// charges in the ledger (through the API) and on the page.
func doubleClickPay(t *testing.T, unprotected bool, shot string) (charges, pageCharges int) {
	in := shoptest.Start(t, unprotected)
	mode := "protected"
	if unprotected {
		mode = "unprotected"
	}

	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(in.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("create")),
		chromedp.Poll[chromedp.Void](`document.getElementById("mode").textContent === "`+mode+`"`, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Click(chromedp.ID("create")),
		chromedp.WaitVisible(chromedp.ID("pay")),
		doubleClick("#pay"),
		// Both clicks answered and the page refreshed after them.
		chromedp.Poll[chromedp.Void](`(document.getElementById("responses").textContent.match(/^click \d+: \d{3}/gm) || []).length === 2`,
			chromedp.WithPollingTimeout(15*time.Second)),
		chromedp.Poll[chromedp.Void](`document.getElementById("status").textContent === "paid"`, chromedp.WithPollingTimeout(5*time.Second)),
		// The last refresh may still be drawing the ledger.
		chromedp.WaitVisible(chromedp.CSS("#ledger tr.charge")),
	)
	if err != nil {
		t.Fatal(err)
	}
	accountID, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("account-id")))
	if err != nil {
		t.Fatal(err)
	}
	var ledger []shop.Entry
	getJSON(t, in.URL+"/api/accounts/"+accountID+"/ledger", &ledger)
	charges = count(ledger, shop.KindCharge)
	// Wait until the page shows what the database holds, then count its rows.
	pageCharges, err = chromedp.Run(ctx, chromedp.Poll[int](
		fmt.Sprintf(`document.querySelectorAll("#ledger tr.charge").length === %d && %d`, charges, charges),
		chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil {
		t.Fatalf("page never showed the ledger's %d charges: %v", charges, err)
	}
	log, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("responses")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page responses:\n%s", log)

	if dir := os.Getenv("SHOP_SCREENSHOT_DIR"); dir != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 gives PNG
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, shot)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", path)
	}
	return charges, pageCharges
}

// browser starts headless Chromium with a fresh profile, closed at the end of the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv("CHROME_BIN")
	if bin == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		t.Fatal("no Chromium found: install Debian's chromium package (apt-get install -y chromium, or make e2e), or set CHROME_BIN")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		// Nothing but the page under test: no update, sync or QUIC traffic leaves the machine.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 1000),
	)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc() // waits for the browser process to exit
	})
	return ctx
}

// doubleClick clicks twice at the centre of the element matching the CSS selector sel, as
// a mouse does: press and release with click count 1, then with click count 2, so the page
// gets two click events (chromedp.DoubleClick sends only the second pair). The centre is
// found once, so the two clicks follow each other as closely as a user's.
func doubleClick(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		xy, err := chromedp.Evaluate[[]float64](fmt.Sprintf(
			`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return [r.x + r.width/2, r.y + r.height/2]; })()`, sel))(ctx, tg)
		if err != nil {
			return chromedp.Void{}, fmt.Errorf("locate %s: %w", sel, err)
		}
		for _, n := range []int{1, 2} {
			if _, err := chromedp.MouseClickXY(xy[0], xy[1], chromedp.ClickCount(n))(ctx, tg); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, nil
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func count(entries []shop.Entry, kind string) int {
	n := 0
	for _, e := range entries {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
