//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr puts the server in its own process group. Only Linux can also
// kill it when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
