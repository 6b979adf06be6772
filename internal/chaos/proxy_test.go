//go:build chaos

package chaos

import (
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxy is a toxiproxy TCP proxy run in-process on loopback, in front of a Redis server.
type proxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, strings.ReplaceAll(t.Name(), "/", "_"), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &proxy{t: t, p: p}
}

// Addr is where clients connect.
func (p *proxy) Addr() string { return p.p.Listen }

// add installs a toxic given as toxiproxy JSON.
func (p *proxy) add(json string) {
	p.t.Helper()
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(json)); err != nil {
		p.t.Fatal(err)
	}
}

// clear removes every toxic.
func (p *proxy) clear() {
	p.t.Helper()
	p.p.Toxics.ResetToxics(p.t.Context())
}
