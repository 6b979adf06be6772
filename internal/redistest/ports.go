package redistest

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports come from [portMin, portMax] so that the cluster bus port (+10000)
// stays below 32768, out of the Linux ephemeral range, and far from 6379.
const (
	portMin       = 20000
	portMax       = 22767
	busPortOffset = 10000
)

// reserved holds the ports this process has handed out and not yet released,
// so a server that is down for a Restart keeps its port against its siblings.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// pickPort returns a port whose number and bus port are both free right now.
// Another process may still take it before redis-server binds; the caller
// retries on that failure.
func pickPort() (int, bool) {
	reserved.Lock()
	defer reserved.Unlock()
	for range 200 {
		p := portMin + rand.IntN(portMax-portMin+1)
		if reserved.ports[p] || !portFree(p) || !portFree(p+busPortOffset) {
			continue
		}
		reserved.ports[p] = true
		return p, true
	}
	return 0, false
}

func releasePort(p int) {
	reserved.Lock()
	delete(reserved.ports, p)
	reserved.Unlock()
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
