package chaos

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrFenced is returned by Store when a token is lower than one the store has already seen.
var ErrFenced = errors.New("chaos: rejected by fencing token")

// Store is a balance guarded by fencing tokens. Reads and writes carry the lock's token; the
// store remembers the highest token it has seen and rejects anything older. Accepted writes
// are logged in order, so Check can verify them.
type Store struct {
	rdb *redis.Client
	key string
}

// storeScript: KEYS 1 balance, 2 highest token, 3 write log. ARGV 1 op, 2 token, 3 value.
// Returns {1, balance} accepted, {0} fenced.
var storeScript = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token < last then return {0} end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[1] == 'w' then
  redis.call('SET', KEYS[1], ARGV[3])
  redis.call('RPUSH', KEYS[3], ARGV[2] .. ' ' .. ARGV[3])
  return {1, tonumber(ARGV[3])}
end
return {1, tonumber(redis.call('GET', KEYS[1]) or '0')}
`)

// NewStore returns the store named name on rdb (a server the faults do not touch).
func NewStore(rdb *redis.Client, name string) *Store {
	return &Store{rdb: rdb, key: "{chaos:" + name + "}"}
}

func (s *Store) keys() []string {
	return []string{s.key + ":balance", s.key + ":token", s.key + ":log"}
}

func (s *Store) run(ctx context.Context, op string, token, value int64) (int64, error) {
	res, err := storeScript.Run(ctx, s.rdb, s.keys(), op, token, value).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("chaos: store: %w", err)
	}
	if res[0] == 0 {
		return 0, ErrFenced
	}
	return res[1], nil
}

// Read returns the balance, or ErrFenced if token is older than the newest seen.
func (s *Store) Read(ctx context.Context, token int64) (int64, error) {
	return s.run(ctx, "r", token, 0)
}

// Write sets the balance, or returns ErrFenced if token is older than the newest seen.
func (s *Store) Write(ctx context.Context, token, balance int64) error {
	_, err := s.run(ctx, "w", token, balance)
	return err
}

// Balance returns the current balance.
func (s *Store) Balance(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, s.keys()[0]).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

// WriteLog returns the accepted writes in the order the store applied them.
func (s *Store) WriteLog(ctx context.Context) ([]Write, error) {
	lines, err := s.rdb.LRange(ctx, s.keys()[2], 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Write, 0, len(lines))
	for _, l := range lines {
		var w Write
		if _, err := fmt.Sscan(l, &w.Token, &w.Value); err != nil {
			return nil, fmt.Errorf("chaos: log line %q: %w", l, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// Write is one accepted write of the store.
type Write struct{ Token, Value int64 }
