package shop_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/examples/shop/internal/shoptest"
)

func rawPost(t *testing.T, c *http.Client, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b))
}

// Protected, the withdraw route reads its body before it queues for the account lock, so a
// client that sends a withdrawal's headers and stalls in its body never holds the account
// (the server's ReadTimeout cuts it off): a pay of the same account goes through.
func TestStalledWithdrawBodyFreesAccount(t *testing.T) {
	in := shoptest.Start(t, false)
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)

	a, o := accountWithOrder(t, c, in.URL)

	conn, err := net.Dial("tcp", strings.TrimPrefix(in.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() }) // before the shop closes (LIFO)
	// Headers and the first byte of a 15-byte body, then nothing.
	fmt.Fprintf(conn, "POST /api/accounts/%s/withdraw HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{", a.ID)
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	code, body := rawPost(t, c, in.URL+"/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "fresh-key")
	took := time.Since(start)
	t.Logf("pay while another client stalls in a withdrawal body: %d %s after %v", code, body, took.Round(time.Millisecond))
	if code != http.StatusOK {
		t.Errorf("pay of a pending order with funds: %d, want 200; the account lock is held by a request still reading its body", code)
	}
}

// accountWithOrder opens an account with 100.00 and a pending order of 25.00 on it.
func accountWithOrder(t *testing.T, c *http.Client, url string) (shop.Account, shop.Order) {
	t.Helper()
	var a shop.Account
	code, body := rawPost(t, c, url+"/api/accounts", `{"owner":"alice","balance":10000}`)
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &a) != nil {
		t.Fatalf("create account: %d %s", code, body)
	}
	var o shop.Order
	code, body = rawPost(t, c, url+"/api/orders", fmt.Sprintf(`{"account_id":%q,"amount":2500}`, a.ID))
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &o) != nil {
		t.Fatalf("create order: %d %s", code, body)
	}
	return a, o
}
