package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// api sends JSON requests to the shop.
type api struct {
	base string
	c    *http.Client
}

// answer is one response, or status 0 with err when no response came.
type answer struct {
	status   int
	body     []byte
	replayed bool
	took     time.Duration
	err      error
}

// do sends one request and reads the whole response.
func (a api) do(ctx context.Context, method, path string, body any, header map[string]string) answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := a.c.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{
		status:   resp.StatusCode,
		body:     b,
		replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		took:     time.Since(start),
		err:      err,
	}
}

// expect sends a request that must answer want, and decodes the body into out (if not nil).
func (a api) expect(ctx context.Context, method, path string, body any, header map[string]string, want int, out any) error {
	ans := a.do(ctx, method, path, body, header)
	if ans.err != nil {
		return fmt.Errorf("storm: %s %s: %w", method, path, ans.err)
	}
	if ans.status != want {
		return fmt.Errorf("storm: %s %s: status %d, want %d: %s", method, path, ans.status, want, ans.body)
	}
	if out != nil {
		if err := json.Unmarshal(ans.body, out); err != nil {
			return fmt.Errorf("storm: %s %s: %w", method, path, err)
		}
	}
	return nil
}

// The shop's JSON shapes, as far as the storm reads them.
type (
	account struct {
		ID      string `json:"id"`
		Balance int64  `json:"balance"`
	}
	order struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	entry struct {
		OrderID string `json:"order_id"`
		Kind    string `json:"kind"`
		Amount  int64  `json:"amount"`
		BasedOn int64  `json:"based_on"`
	}
	queueInfo struct {
		Pending, Active, Scheduled, Retry, Archived int
	}
)

// signed is the entry's effect on the balance.
func (e entry) signed() int64 {
	if e.Kind == "refund" {
		return e.Amount
	}
	return -e.Amount
}
