package redistest

import "syscall"

// sysProcAttr puts the server in its own process group (so signals reach any
// child it forks) and has the kernel kill it when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
