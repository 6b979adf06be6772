package redistest

import (
	"fmt"
	"os"
	"os/exec"
)

// lookBinary finds name (redis-server or redis-cli), letting envVar override
// the PATH lookup.
func lookBinary(name, envVar string) (string, error) {
	if v := os.Getenv(envVar); v != "" {
		p, err := exec.LookPath(v)
		if err != nil {
			return "", fmt.Errorf("redistest: %s=%q is not an executable: %w", envVar, v, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found in PATH: run \"make redis\" (it installs it when run as root) or \"sudo apt-get install redis-server redis-tools\"", name)
	}
	return p, nil
}

func serverBinary() (string, error) { return lookBinary("redis-server", "REDIS_SERVER_BIN") }

func cliBinary() (string, error) { return lookBinary("redis-cli", "REDIS_CLI_BIN") }
