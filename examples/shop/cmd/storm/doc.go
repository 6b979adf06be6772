// Command storm drives a running shop with the load of `make demo` and prints what it
// found: answers by status, charges and refunds in the ledger, expected against final
// balances, lost updates, ledger consistency and latency.
//
//	go run ./examples/shop/cmd/shop &
//	go run ./examples/shop/cmd/storm -url http://127.0.0.1:8080
//
// It exits 1 when the run shows an anomaly and -strict is set, 2 on a failure to run.
package main
