// Package shop is the example service of lockguard: a small shop whose handlers do what
// a naive service does (read a balance, call a slow payment provider, then write the
// balance and a ledger row computed from that read) and which the lock middlewares make
// correct. The final write is one database transaction, so a crash cannot tear it; the
// race between the read and the write is what the locks close.
//
// It serves a Gin HTTP API (accounts, orders, pay with an Idempotency-Key, withdraw,
// refund, ledger, an HTML page) and runs an asynq worker that applies refunds. The ledger
// is a SQLite database (pure Go, no cgo); Redis holds the task queue, the locks and the
// idempotency records.
//
//	in, err := shop.Start(ctx, shop.Options{Addr: "127.0.0.1:0"}) // own redis-server and SQLite file
//	...
//	defer in.Close(context.Background())
//	fmt.Println(in.URL)
//
// Protected (the default), Protect puts ginlock on the pay and withdraw routes and
// asynqlock on the refund task; the account lock key "account:{id}" is the same on both,
// so HTTP requests and the worker exclude each other. With Options.Unprotected the same
// routes run without locks, and concurrent requests double-charge and lose updates: the
// storm package measures both.
//
// Every balance write records the version it was computed from, and so does its ledger
// entry; two entries based on one version are a lost update. That bookkeeping exists so
// anomalies can be counted from the database, not to prevent them.
package shop
