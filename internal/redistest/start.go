package redistest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// readyPoll is the interval between readiness probes.
const readyPoll = 20 * time.Millisecond

// logTailLines is how much of the log a start error quotes.
const logTailLines = 20

// start runs redis-server and waits until it answers as itself. The caller
// holds s.mu or has not published s yet.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis.log")
	stdioPath := filepath.Join(s.dir, "stdio.log")
	logFrom, stdioFrom := fileSize(logPath), fileSize(stdioPath)

	stdio, err := os.OpenFile(stdioPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = stdio, stdio
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = stdio.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	if err := s.waitReady(p); err != nil {
		s.proc = p
		_ = s.stopLocked(syscall.SIGKILL)
		tail := append(lastLines(readFrom(logPath, logFrom), logTailLines),
			lastLines(readFrom(stdioPath, stdioFrom), logTailLines)...)
		if bytes.Contains(tail, []byte("Address already in use")) {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return fmt.Errorf("redistest: redis-server on port %d: %w\n--- log tail (%s, then %s) ---\n%s",
			s.port, err, logPath, stdioPath, tail)
	}
	s.proc = p
	return nil
}

// waitReady probes until the server answers with its own process id, the
// process exits, or the start timeout passes.
func (s *Server) waitReady(p *process) error {
	deadline := time.NewTimer(s.cfg.startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		pid, err := serverPID(s.Addr(), time.Second)
		if err == nil {
			if pid == p.cmd.Process.Pid {
				return nil
			}
			return fmt.Errorf("%w (pid %d answers on the port)", errPortTaken, pid)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited during start: %v", p.cmd.ProcessState)
		case <-deadline.C:
			return fmt.Errorf("no answer within %v (last probe: %v)", s.cfg.startTimeout, err)
		case <-tick.C:
		}
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, off int64) []byte {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return nil
	}
	return b[off:]
}

func lastLines(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")
	if len(b) == 0 {
		return nil
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return append(bytes.Join(lines, []byte("\n")), '\n')
}
