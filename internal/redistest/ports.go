package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Ports come from [portMin, portMax] so that the cluster bus port (+10000)
// stays below 32768, out of the Linux ephemeral range, and far from 6379.
const (
	portMin       = 20000
	portMax       = 22767
	busPortOffset = 10000
)

// portLockDir holds one lock file per port. A server holds an flock on its
// port's file from the pick until Close, so test binaries running at the same
// time never pick a port whose server is down for a Restart. The kernel drops
// the lock when the process dies, so a crash leaves nothing to clean up. The
// directory is per user, so that users never block each other.
var portLockDir = filepath.Join(os.TempDir(), "redistest-ports-"+strconv.Itoa(os.Getuid()))

// pickPort returns a port that no other server of this package holds and
// whose number and bus port are both free right now, with the held lock.
// A process outside this package may still bind it before redis-server does;
// the caller retries on that failure.
func pickPort() (int, *os.File, error) {
	if err := os.MkdirAll(portLockDir, 0o777); err != nil {
		return 0, nil, fmt.Errorf("redistest: port lock dir: %w", err)
	}
	for range 200 {
		p := portMin + rand.IntN(portMax-portMin+1)
		lock, err := lockPort(p)
		if err != nil {
			return 0, nil, err
		}
		if lock == nil {
			continue
		}
		if portFree(p) && portFree(p+busPortOffset) {
			return p, lock, nil
		}
		_ = lock.Close()
	}
	return 0, nil, errors.New("redistest: no free port in 20000-22767")
}

// lockPort takes the port's lock without waiting; it returns nil, nil when
// another server holds it.
func lockPort(p int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(p)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("redistest: port lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("redistest: port lock: %w", err)
	}
	return f, nil
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
