package shop

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // pure-Go SQLite driver, registered as "sqlite"
)

// ErrNotFound is returned for an account or order id the store does not hold.
var ErrNotFound = errors.New("shop: not found")

// ErrFenced is returned for a balance read or write under an account lock that is no longer
// the newest: a later holder of the lock (one that took it after it was lost, say when Redis
// restarted empty) has claimed the account with a higher fencing token.
var ErrFenced = errors.New("shop: account lock superseded")

// Store is the shop's ledger database: accounts, orders and ledger entries in SQLite.
//
// The handlers use it in separate steps the way a naive service does: read the balance,
// call the provider, then Apply the change. Concurrent requests interleave between the read
// and the write unless a lock serializes them; that is the race the demo shows. The write
// itself (balance, order status, ledger entry) is one transaction, so a crash cannot tear it.
type Store struct {
	db *sql.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS accounts (
	id      TEXT PRIMARY KEY,
	owner   TEXT NOT NULL,
	balance INTEGER NOT NULL,
	version INTEGER NOT NULL DEFAULT 0,
	fence   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS orders (
	id         TEXT PRIMARY KEY,
	account_id TEXT NOT NULL REFERENCES accounts(id),
	amount     INTEGER NOT NULL,
	status     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	account_id TEXT NOT NULL REFERENCES accounts(id),
	order_id   TEXT NOT NULL DEFAULT '',
	kind       TEXT NOT NULL,
	amount     INTEGER NOT NULL,
	based_on   INTEGER NOT NULL,
	at         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_account ON ledger(account_id, seq);
`

// OpenStore opens (creating if needed) the SQLite database at path and its schema.
// The database uses WAL and a busy timeout; the pool is one connection because SQLite
// has one writer anyway, and it keeps SQLITE_BUSY out of the demo: the races the demo
// shows come from the handlers' separate steps, not from the database.
func OpenStore(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)") // WAL: durable at checkpoints, no fsync per commit
	q.Add("_pragma", "foreign_keys(1)")
	// The path is escaped: in the URI, "?" would start the query, "#" end it, "%" escape.
	// Clean keeps a path starting with "//" from reading as a URI authority.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: filepath.Clean(path)}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("shop: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("shop: create schema in %s: %w", path, err)
	}
	// Databases made before accounts had a fence column get it.
	if _, err := db.ExecContext(ctx, `ALTER TABLE accounts ADD COLUMN fence INTEGER NOT NULL DEFAULT 0`); err != nil &&
		!strings.Contains(err.Error(), "duplicate column") {
		_ = db.Close()
		return nil, fmt.Errorf("shop: add fence column in %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// newID returns a random id such as "acc_3f9c0a1b2c4d5e6f".
func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return prefix + "_" + hex.EncodeToString(b[:])
}

// notFound maps sql.ErrNoRows to ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}
