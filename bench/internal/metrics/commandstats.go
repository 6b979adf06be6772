package metrics

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	Calls int64 // times the command ran, top-level or inside a script
	Usec  int64 // server CPU time spent in it, in microseconds (a script's includes its inner calls)
}

// CommandStats maps a command name as INFO commandstats spells it ("evalsha", "set",
// "client|setinfo") to its counters.
type CommandStats map[string]CommandStat

// ReadCommandStats reads INFO commandstats. Redis counts commands that scripts run as calls
// too, so a cross-check of top-level requests must only sum commands the client sends itself.
func ReadCommandStats(ctx context.Context, rdb redis.UniversalClient) (CommandStats, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	cs := CommandStats{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CommandStat
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &st.Calls
			case "usec":
				dst = &st.Usec
			default:
				continue
			}
			if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("info commandstats: %q: %w", line, err)
			}
		}
		cs[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return cs, nil
}

// Sub returns the per-command difference c - o, leaving out commands that did not run.
func (c CommandStats) Sub(o CommandStats) CommandStats {
	d := CommandStats{}
	for k, v := range c {
		if n := v.Calls - o[k].Calls; n != 0 {
			d[k] = CommandStat{Calls: n, Usec: v.Usec - o[k].Usec}
		}
	}
	return d
}

// Sum returns the total calls of the named commands.
func (c CommandStats) Sum(names ...string) int64 {
	var n int64
	for _, name := range names {
		n += c[name].Calls
	}
	return n
}

// SumUsec returns the total server time of the named commands, in microseconds.
func (c CommandStats) SumUsec(names ...string) int64 {
	var n int64
	for _, name := range names {
		n += c[name].Usec
	}
	return n
}
