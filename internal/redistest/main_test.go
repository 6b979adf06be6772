package redistest_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/internal/redistest"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(redistest.DyingOwnerEnv); mode != "" {
		dyingOwner(mode)
	}
	goleak.VerifyTestMain(m)
}

// dyingOwner is the child process of TestDeadOwnersDirIsRemoved: it starts a server, writes
// its directory and process id to the file named by REDISTEST_DYING_OUT, then dies the way
// mode says, without closing the server.
func dyingOwner(mode string) {
	srv, err := redistest.Launch()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line := fmt.Sprintf("%s %d", srv.Dir(), srv.PID())
	if err := os.WriteFile(os.Getenv("REDISTEST_DYING_OUT"), []byte(line), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch mode {
	case "exit": // as a test binary that timed out
		os.Exit(2)
	case "panic":
		go panic("a goroutine of the test panicked")
	}
	time.Sleep(time.Minute) // "sleep": the parent kills it
	os.Exit(1)
}
