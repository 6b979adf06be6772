package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/internal/redistest"
	"go.uber.org/goleak"
)

// TestMain lets the test binary stand in for the benchmark binary as the load generator,
// which the Gin scenario starts by re-executing itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == loadgenArg {
		os.Exit(loadgenMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

// The Gin scenario serves every route through the load generator process without errors,
// counts 2 Redis round trips per request on the routes that lock and none on the others, and
// the report compares the bare route with the one that reads its body.
func TestGinRoutes(t *testing.T) {
	srv, err := redistest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := newPlan(true)
	p.ginDur, p.ginRounds, p.ginHighConns = 200*time.Millisecond, 1, 2
	b, err := newBench(t.Context(), srv, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	rep := &report{plan: p}
	if err := b.gin(context.WithoutCancel(t.Context()), rep); err != nil {
		t.Fatal(err)
	}
	g := rep.gin
	for route := range routePaths {
		for _, conns := range []int{g.lowConns, g.highConns} {
			row := g.row(route, conns)
			switch {
			case row == nil:
				t.Errorf("%s, %d connections: no row", route, conns)
				continue
			case row.requests == 0 || row.errors != 0:
				t.Errorf("%s, %d connections: %d requests, %d errors", route, conns, row.requests, row.errors)
			}
			want := 2.0
			if route == routeBare || route == routeBareBody {
				want = 0
			}
			if row.roundTrips != want {
				t.Errorf("%s, %d connections: %.2f round trips per request, want %.0f", route, conns, row.roundTrips, want)
			}
		}
	}
	var out strings.Builder
	rep.writeGin(func(format string, args ...any) { fmt.Fprintf(&out, format, args...) })
	for _, want := range []string{"| bare, reads its body | 1 |", "reads the request body to its end first (no Redis) differs from the bare one by "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// readBody leaves nothing of the request body for the handler: it read it to its end.
func TestReadBody(t *testing.T) {
	gin.SetMode(gin.TestMode)
	r := gin.New()
	var left int
	r.POST("/body", readBody, func(c *gin.Context) {
		rest, err := io.ReadAll(c.Request.Body)
		if err != nil {
			t.Error(err)
		}
		left = len(rest)
		c.Status(http.StatusOK)
	})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/body", strings.NewReader(`{"amount":1}`)))
	if w.Code != http.StatusOK || left != 0 {
		t.Errorf("status %d, %d bytes left for the handler", w.Code, left)
	}
}

func TestSignedDur(t *testing.T) {
	if got := signedDur(12 * time.Microsecond); got != "+12 µs" {
		t.Errorf("signedDur(12µs) = %q", got)
	}
	if got := signedDur(-3 * time.Microsecond); got != "-3 µs" {
		t.Errorf("signedDur(-3µs) = %q", got)
	}
}
