package metrics

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReadServerCPU reads the CPU time the Redis process has used, user and system, from INFO cpu
// (Redis's own getrusage): unlike commandstats, it counts everything the server does for a
// client, reading and parsing requests, writing replies and the event loop, besides running
// the commands.
func ReadServerCPU(ctx context.Context, rdb redis.UniversalClient) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("info cpu: %w", err)
	}
	return parseServerCPU(info)
}

func parseServerCPU(info string) (time.Duration, error) {
	var total time.Duration
	found := 0
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("info cpu: %q: %w", line, err)
		}
		total += time.Duration(math.Round(s*1e6)) * time.Microsecond // Redis gives microseconds
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("info cpu: used_cpu_sys and used_cpu_user not both found")
	}
	return total, nil
}

// ProcessCPU returns the CPU time this process has used, user and system, over all its threads:
// the code under test, go-redis, and the Go runtime (its scheduler, network poller and garbage
// collector).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
