package redistest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A server's directory holds ownerLock, flocked by the process that made it until Close.
// The kernel drops the lock when that process dies (killed, timed out, crashed), and the
// next Launch of any test binary of the same user removes the directory. The lock file is
// flocked under another name and then renamed into place, so that a directory whose
// ownerLock can be taken is never one still being set up.
const (
	dirPrefix  = "redistest-"
	ownerLock  = "owner.lock"
	ownerSetup = "owner.setup"
	// unownedAge is how old a directory without ownerLock must be to be removed: one made by
	// an older harness, or abandoned between its creation and its lock.
	unownedAge = time.Hour
)

var sweepOnce sync.Once

// held keeps the lock files of running servers reachable until Close. A Server nobody
// references any more (a TestMain that keeps only its address) still runs its redis-server,
// but the finalizer of an unreachable *os.File would close it and drop its flock: its port
// could be picked again and its directory swept.
var held sync.Map // *os.File -> struct{}

func keep(files ...*os.File) {
	for _, f := range files {
		held.Store(f, struct{}{})
	}
}

func unkeep(files ...*os.File) {
	for _, f := range files {
		held.Delete(f)
	}
}

// makeDir creates a server directory and takes its owner lock, after removing, once per
// process, the directories that dead test binaries left behind.
func makeDir() (string, *os.File, error) {
	sweepOnce.Do(sweepStaleDirs)
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ownerSetup), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		if err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			err = os.Rename(filepath.Join(dir, ownerSetup), filepath.Join(dir, ownerLock))
		}
		if err != nil {
			_ = lock.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("redistest: temp dir lock: %w", err)
	}
	return dir, lock, nil
}

// sweepStaleDirs removes this user's server directories whose owner is gone. Errors are
// ignored: a directory left is only disk space.
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		if strings.HasPrefix(filepath.Base(d), filepath.Base(portLockDir)) {
			continue
		}
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		removeIfOwnerGone(d, fi)
	}
}

// removeIfOwnerGone removes server directory d when the process that made it is gone,
// holding its owner lock while it does.
func removeIfOwnerGone(d string, fi fs.FileInfo) {
	f, err := os.OpenFile(filepath.Join(d, ownerLock), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if time.Since(fi.ModTime()) > unownedAge {
			_ = os.RemoveAll(d)
		}
		return
	}
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		_ = os.RemoveAll(d)
	}
}
