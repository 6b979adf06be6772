package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockguard/lockguard/examples/shop/internal/storm"
)

func main() {
	var cfg storm.Config
	flag.StringVar(&cfg.BaseURL, "url", "http://127.0.0.1:8080", "base URL of the shop")
	flag.IntVar(&cfg.Pays, "pays", 50, "concurrent pays of one order")
	flag.IntVar(&cfg.PayKeys, "pay-keys", 5, "distinct Idempotency-Keys among the pays")
	flag.IntVar(&cfg.Accounts, "accounts", 4, "accounts the withdrawals are spread over")
	flag.IntVar(&cfg.Withdrawals, "withdrawals", 200, "concurrent withdrawals")
	flag.IntVar(&cfg.RefundOrders, "refund-orders", 3, "orders per account refunded during the storm")
	flag.IntVar(&cfg.RefundCopies, "refund-copies", 2, "times each refund is requested")
	strict := flag.Bool("strict", false, "exit 1 when the run shows any anomaly")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	progress, done := storm.ProgressLine(os.Stderr, "storm")
	cfg.Progress = progress
	r, err := storm.Run(ctx, cfg)
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := storm.WriteTable(os.Stdout, r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *strict && !r.Clean() {
		os.Exit(1)
	}
}
