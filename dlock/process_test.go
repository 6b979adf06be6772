package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// helperEnv makes the test binary act as one of several processes sharing a counter.
const helperEnv = "DLOCK_TEST_COUNTER_PROCESS"

// counterProcess increments a shared counter n times under the lock, with a plain GET and SET.
func counterProcess() error {
	addr, key := os.Getenv("DLOCK_TEST_ADDR"), os.Getenv("DLOCK_TEST_KEY")
	n, err := strconv.Atoi(os.Getenv("DLOCK_TEST_N"))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range n {
		err := c.Do(ctx, key, func(ctx context.Context) error {
			v, err := rdb.Get(ctx, key+":counter").Int()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			return rdb.Set(ctx, key+":counter", v+1, 0).Err()
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func TestMutualExclusionAcrossProcesses(t *testing.T) {
	srv, rdb, _ := setup(t)
	ctx := testContext(t, 90*time.Second)
	key := uniqueKey(t)
	const procs, n = 3, 200
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "DLOCK_TEST_ADDR="+srv.Addr(),
			"DLOCK_TEST_KEY="+key, "DLOCK_TEST_N="+strconv.Itoa(n))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	if v, _ := rdb.Get(ctx, key+":counter").Int(); v != procs*n {
		t.Fatalf("counter = %d, want %d", v, procs*n)
	}
}

func helperProcessMain() bool {
	if os.Getenv(helperEnv) == "" {
		return false
	}
	if err := counterProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "counter process:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
