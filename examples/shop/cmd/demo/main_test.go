package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo takes no flags: -h prints what it does and exits 0 without running it, and an
// argument it does not know is refused with status 2, also without running it.
func TestUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "It takes no flags."},
		{[]string{"-x"}, 2, "flag provided but not defined: -x"},
		{[]string{"now"}, 2, `demo: takes no arguments (got ["now"])`},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "lockguard demo:") {
			t.Errorf("demo %v: exit %d, output:\n%s\nwant exit %d, %q in the output and no run", tc.args, code, out, tc.code, tc.want)
		}
	}
}
