package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// check asks every server for its eviction settings: on a Cluster the masters and the
// replicas (a replica is promoted with its own settings), else the one server (behind
// Sentinel, the current master).
func (b *redisBackend) check(ctx context.Context) error {
	var (
		mu       sync.Mutex
		problems []string
	)
	node := func(ctx context.Context, rdb *redis.Client) error {
		p, err := evictionProblem(ctx, rdb)
		if p != "" {
			mu.Lock()
			problems = append(problems, p)
			mu.Unlock()
		}
		return err
	}
	var err error
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, node)
	case *redis.Client:
		err = node(ctx, c)
	default:
		return unavailable("check", fmt.Errorf("cannot list the servers of a %T", b.rdb))
	}
	// A server found unsafe is reported even when another could not be asked.
	var errs []error
	if len(problems) > 0 {
		slices.Sort(problems) // the servers answer in any order
		errs = append(errs, fmt.Errorf("%w: %s", ErrUnsafeStore, strings.Join(problems, "; ")))
	}
	if err != nil {
		errs = append(errs, unavailable("check", err))
	}
	return errors.Join(errs...)
}

// evictionProblem describes how rdb's server may delete keys before they expire, or returns
// "" when it never does: its maxmemory-policy is noeviction, or it has no maxmemory limit.
// It reads INFO memory rather than CONFIG GET, which managed services often refuse and which
// would also show secrets to a user allowed to run it.
func evictionProblem(ctx context.Context, rdb *redis.Client) (string, error) {
	addr := rdb.Options().Addr
	if addr == "FailoverClient" { // go-redis's name for the client of a Sentinel master
		addr = "the master behind Sentinel"
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return "", fmt.Errorf("%s: INFO memory: %w", addr, err)
	}
	var limit, policy string
	for _, line := range strings.Split(info, "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "maxmemory":
			limit = value
		case "maxmemory_policy":
			policy = value
		}
	}
	if limit == "" || policy == "" {
		return "", fmt.Errorf("%s: INFO memory has no maxmemory and maxmemory_policy", addr)
	}
	if policy == "noeviction" || limit == "0" {
		return "", nil
	}
	return fmt.Sprintf("%s deletes keys when full (maxmemory %s bytes, maxmemory-policy %s): a held lock or a completion record may vanish; set maxmemory-policy noeviction", addr, limit, policy), nil
}
