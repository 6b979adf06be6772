package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ensureEnv is a PATH for scripts/ensure-redis.sh made of links to the tools it needs, a
// fake id that prints uid, a fake apt-get that only logs its arguments to the returned
// file, and links to redis-server and redis-cli under the names given in bins (name ->
// real binary; "" makes a file of that name without the execute bit). The real apt-get is
// never on it.
func ensureEnv(t *testing.T, uid string, bins map[string]string) (path, aptLog string) {
	t.Helper()
	dir := t.TempDir()
	aptLog = filepath.Join(dir, "apt.log")
	write := func(name, script string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("apt-get", "#!/bin/sh\necho \"apt-get $*\" >> "+aptLog+"\n")
	write("id", "#!/bin/sh\necho "+uid+"\n")
	link := func(name, target string) {
		p, err := exec.LookPath(target)
		if err != nil {
			t.Fatalf("this test needs %s: %v", target, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"bash", "env"} {
		link(tool, tool)
	}
	for name, target := range bins {
		if target == "" { // a file of that name, not executable
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		link(name, target)
	}
	return dir, aptLog
}

// scripts/ensure-redis.sh, which make test and make demo run first, finds the binaries as
// this harness does (REDIS_SERVER_BIN and REDIS_CLI_BIN as names on the PATH or absolute
// paths), names what is missing, installs with apt-get only as root, and refuses a relative
// path, which the tests, run in each package's directory, could not resolve.
func TestEnsureRedisScript(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "ensure-redis.sh"))
	if err != nil {
		t.Fatal(err)
	}
	renamed := map[string]string{"valkey-server": "redis-server", "valkey-cli": "redis-cli"}
	for _, tc := range []struct {
		name     string
		uid      string
		bins     map[string]string
		env      []string
		ok       bool
		apt      bool     // apt-get update and install were run
		messages []string // in the output
	}{
		{"installed", "1000", map[string]string{"redis-server": "redis-server", "redis-cli": "redis-cli"}, nil, true, false, nil},
		{"named by the variables", "0", renamed, []string{"REDIS_SERVER_BIN=valkey-server", "REDIS_CLI_BIN=valkey-cli"}, true, false, nil},
		{"absolute path", "0", renamed, []string{"REDIS_SERVER_BIN=" + lookPath(t, "redis-server"), "REDIS_CLI_BIN=valkey-cli"}, true, false, nil},
		{"missing as a user", "1000", nil, nil, false, false, []string{"redis-server redis-cli not found", "sudo apt-get install redis-server redis-tools"}},
		{"cli missing as a user", "1000", map[string]string{"redis-server": "redis-server"}, nil, false, false, []string{"lockguard: redis-cli not found"}},
		{"missing as root", "0", nil, nil, false, true, []string{"installing", "redis-server redis-cli still missing after apt-get install"}},
		{"not executable", "1000", map[string]string{"redis-cli": "redis-cli", "redis-server": ""}, nil, false, false, []string{"lockguard: redis-server not found"}},
		{"relative path", "0", renamed, []string{"REDIS_SERVER_BIN=./bin/redis-server"}, false, false, []string{"REDIS_SERVER_BIN=./bin/redis-server: give a name on the PATH or an absolute path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, aptLog := ensureEnv(t, tc.uid, tc.bins)
			cmd := exec.Command(script)
			cmd.Env = append([]string{"PATH=" + path}, tc.env...)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok {
				t.Fatalf("exit %v, want success %v; output:\n%s", err, tc.ok, out)
			}
			apt, _ := os.ReadFile(aptLog)
			wantApt := ""
			if tc.apt {
				wantApt = "apt-get update\napt-get install -y redis-server redis-tools\n"
			}
			if string(apt) != wantApt {
				t.Errorf("apt-get calls:\n%s\nwant:\n%s", apt, wantApt)
			}
			for _, m := range tc.messages {
				if !strings.Contains(string(out), m) {
					t.Errorf("output %q, want it to contain %q", out, m)
				}
			}
		})
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
