package shop_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/examples/shop/internal/shoptest"
)

// A withdrawal that queues for the account lock longer than the server's ReadTimeout (5 s,
// counted from the request's start) still gets its body: the route reads it before it
// queues. Before, the handler read it after the wait, and a body that had not arrived with
// the headers (a second segment, Expect: 100-continue) failed on the expired deadline: 400
// bad_json for a well-formed request.
func TestWithdrawQueuedPastReadTimeout(t *testing.T) {
	in := shoptest.Start(t, false) // protected
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)

	var a shop.Account
	code, body := rawPost(t, c, in.URL+"/api/accounts", `{"owner":"alice","balance":10000}`)
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &a) != nil {
		t.Fatalf("create account: %d %s", code, body)
	}

	// Someone else (another request in the queue, the refund worker) holds the account
	// for 6 s: less than the route's 10 s wait.
	rdb := redis.NewClient(&redis.Options{Addr: in.RedisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	locks := dlock.New(rdb)
	t.Cleanup(func() { _ = locks.Close() })
	held, err := locks.Acquire(t.Context(), "account:"+a.ID)
	if err != nil {
		t.Fatal(err)
	}
	release := time.AfterFunc(6*time.Second, func() { _ = held.Release(t.Context()) })
	t.Cleanup(func() { release.Stop() })

	// A Go client with Expect: 100-continue, queued behind the same holder: it sends its
	// body when the server asks for it, which is when the handler reads it.
	type answer struct {
		code int
		err  error
	}
	expectDone := make(chan answer, 1)
	go func() {
		ec := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 30 * time.Second}}
		defer ec.CloseIdleConnections()
		req, err := http.NewRequest("POST", in.URL+"/api/accounts/"+a.ID+"/withdraw", strings.NewReader(`{"amount":200}`))
		if err != nil {
			expectDone <- answer{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		resp, err := ec.Do(req)
		if err != nil {
			expectDone <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		expectDone <- answer{code: resp.StatusCode}
	}()

	conn, err := net.Dial("tcp", strings.TrimPrefix(in.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	payload := `{"amount":100}`
	// The whole request within 50 ms: headers, then the body in a second write.
	fmt.Fprintf(conn, "POST /api/accounts/%s/withdraw HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", a.ID, len(payload))
	time.Sleep(50 * time.Millisecond)
	fmt.Fprint(conn, payload)

	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	t.Logf("withdraw that queued 6 s for the account lock: %d %v", resp.StatusCode, got)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a well-formed withdrawal sent in 50 ms answered %d %v after queueing for the account lock, want 200", resp.StatusCode, got)
	}
	e := <-expectDone
	t.Logf("withdraw with Expect: 100-continue that queued for the account lock: %d %v", e.code, e.err)
	if e.err != nil || e.code != http.StatusOK {
		t.Errorf("a well-formed withdrawal with Expect: 100-continue answered %d (%v), want 200", e.code, e.err)
	}
}
