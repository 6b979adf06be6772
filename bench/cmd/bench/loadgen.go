package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadgenArg, as the first argument, makes this binary the HTTP load generator.
const loadgenArg = "loadgen"

// loadResult is what the load generator prints, as JSON, when it is done.
type loadResult struct {
	Requests int64           `json:"requests"`
	Errors   int64           `json:"errors"` // transport errors and non-200 answers
	Statuses map[int]int64   `json:"statuses"`
	Elapsed  time.Duration   `json:"elapsed"`
	Latency  []time.Duration `json:"latency"` // sorted, one per successful request
}

// loadgenMain runs closed-loop HTTP clients against one URL: -conns connections each send a
// POST with a unique Idempotency-Key, wait for the answer, and send the next, until -dur has
// passed or -max requests were sent. It only ever targets the URL it is given (loopback).
func loadgenMain(args []string) int {
	fs := flag.NewFlagSet(loadgenArg, flag.ContinueOnError)
	url := fs.String("url", "", "target URL (loopback)")
	conns := fs.Int("conns", 1, "concurrent connections")
	dur := fs.Duration("dur", time.Second, "how long to send")
	maxReqs := fs.Int64("max", 100000, "most requests to send")
	if err := fs.Parse(args); err != nil || *url == "" {
		fmt.Fprintln(os.Stderr, "usage: bench loadgen -url URL [-conns N] [-dur D] [-max N]")
		return 2
	}
	tr := &http.Transport{MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var sent, errs atomic.Int64
	res := loadResult{Statuses: map[int]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	for c := range *conns {
		wg.Go(func() {
			var lat []time.Duration
			statuses := map[int]int64{}
			for i := 0; ctx.Err() == nil && sent.Add(1) <= *maxReqs; i++ {
				req, err := http.NewRequest(http.MethodPost, *url, bytes.NewReader([]byte(`{}`)))
				if err != nil {
					errs.Add(1)
					continue
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d-%d", run, c, i))
				t := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				d := time.Since(t)
				statuses[resp.StatusCode]++
				if resp.StatusCode != http.StatusOK {
					errs.Add(1)
					continue
				}
				lat = append(lat, d)
			}
			mu.Lock()
			res.Latency = append(res.Latency, lat...)
			for k, v := range statuses {
				res.Statuses[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Errors = errs.Load()
	res.Requests = int64(len(res.Latency)) + res.Errors
	slices.Sort(res.Latency)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runLoadgen starts this binary as the load generator in a child process and waits for its
// result; the child is killed if it outlives its duration by much.
func runLoadgen(ctx context.Context, url string, conns int, dur time.Duration, maxReqs int) (*loadResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, loadgenArg, "-url", url, "-conns", strconv.Itoa(conns),
		"-dur", dur.String(), "-max", strconv.Itoa(maxReqs))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("load generator: %w: %s", err, stderr.String())
	}
	var res loadResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("load generator output: %w", err)
	}
	return &res, nil
}
