package dlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/lib.lua
	luaLib string
	//go:embed scripts/acquire.lua
	luaAcquire string
	//go:embed scripts/release.lua
	luaRelease string
	//go:embed scripts/leave.lua
	luaLeave string
	//go:embed scripts/reenter.lua
	luaReenter string
	//go:embed scripts/renew.lua
	luaRenew string

	scriptAcquire = newLuaScript(luaLib + luaAcquire)
	scriptRelease = newLuaScript(luaLib + luaRelease)
	scriptLeave   = newLuaScript(luaLib + luaLeave)
	scriptReenter = newLuaScript(luaReenter)
	scriptRenew   = newLuaScript(luaRenew)
	// scriptProbe does nothing, as a script that may write: it reaches the master of its
	// key's slot, and Redis holds it back while it holds back writes (CLIENT PAUSE WRITE, a
	// failover), exactly as it would the look whose silence it checks.
	scriptProbe = newLuaScript("return 1")
)

// luaScript is a script of the Redis backend, sent by its SHA1 (EVALSHA), and in full (EVAL)
// only when the server does not have it yet: after a restart, a failover, SCRIPT FLUSH.
type luaScript struct {
	src, sha string
	shaArg   any // sha as a command argument, converted once
}

// newLuaScript makes the script of src, its SHA1 computed once.
func newLuaScript(src string) *luaScript {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &luaScript{src: src, sha: sha, shaArg: sha}
}

// run runs s on keys with args, as redis.Script.Run does.
func (s *luaScript) run(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	keyArgs := make([]any, len(keys))
	for i, key := range keys {
		keyArgs[i] = key
	}
	return s.runKeyArgs(ctx, rdb, keyArgs, args...)
}

// runKeyArgs is run with the keys already converted to command arguments (see lockNames),
// building the command in one argument slice: Script.Run converts the keys and copies keys
// and args into a slice of its own on every call.
func (s *luaScript) runKeyArgs(ctx context.Context, rdb redis.UniversalClient, keyArgs []any, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keyArgs)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.shaArg, len(keyArgs))
	cmdArgs = append(cmdArgs, keyArgs...)
	cmdArgs = append(cmdArgs, args...)
	cmd := s.process(ctx, rdb, cmdArgs, len(keyArgs) > 0)
	if isNoScript(cmd.Err()) {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd = s.process(ctx, rdb, cmdArgs, len(keyArgs) > 0)
	}
	return cmd
}

// queue adds s on keys with args to pipeline p: by its SHA1, or in full when useEval (the
// server answered NOSCRIPT to the SHA1 before).
func (s *luaScript) queue(ctx context.Context, p redis.Pipeliner, useEval bool, keys []string, args ...any) *redis.Cmd {
	if useEval {
		return p.Eval(ctx, s.src, keys, args...)
	}
	return p.EvalSha(ctx, s.sha, keys, args...)
}

// process sends one EVALSHA or EVAL command made of cmdArgs; keyed: it names keys, by which
// a Cluster client routes it.
func (s *luaScript) process(ctx context.Context, rdb redis.UniversalClient, cmdArgs []any, keyed bool) *redis.Cmd {
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if keyed {
		cmd.SetFirstKeyPos(3) // a Cluster client routes the command by its first key
	}
	_ = rdb.Process(ctx, cmd)
	return cmd
}

// isNoScript reports whether the server did not know a script by its SHA (after a restart or
// failover), so it must be sent in full.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// pipeline sends n script commands in one pipeline; the ones the server does not know by SHA
// (after a restart or failover) are sent again in full.
func (b *redisBackend) pipeline(ctx context.Context, n int, cmd func(p redis.Pipeliner, i int, useEval bool) *redis.Cmd) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cmds[i] = cmd(p, i, false)
		}
		return nil
	})
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, err
	}
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			cmds[i] = cmd(p, i, true)
		}
		return nil
	})
	for _, c := range cmds {
		if c.Err() != nil {
			return cmds, c.Err()
		}
	}
	return cmds, err
}
