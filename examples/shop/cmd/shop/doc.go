// Command shop runs the lockguard example shop: the HTTP API and page on -addr and the
// refund worker, protected by ginlock and asynqlock unless -unprotected is given.
//
// With no configuration it starts its own throwaway redis-server on a free loopback port
// and its own SQLite file in a temporary directory, and removes both on exit. REDIS_ADDR
// and -db point it at a real Redis and database file instead; with -db alone, its own
// redis-server keeps an append-only file in the directory <db>.redis, so that queued refunds
// and stored answers survive a restart along with the ledger. SIGINT or SIGTERM shut it
// down cleanly and exit 0: requests queued for a lock answer 503 at once, running ones get
// up to 10 s (then they are stopped and answer 503), and it prints "shop: stopped".
//
//	go run ./examples/shop/cmd/shop               # http://127.0.0.1:8080
//	go run ./examples/shop/cmd/shop -unprotected  # the same shop without locks
package main
