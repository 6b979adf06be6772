package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// Section is one critical section of a bank worker.
type Section struct {
	Holder   string    `json:"holder"`
	Token    int64     `json:"token"`
	Start    time.Time `json:"start"`    // lock obtained
	End      time.Time `json:"end"`      // write answered
	Acked    bool      `json:"acked"`    // the store accepted the write
	Fenced   bool      `json:"fenced"`   // the store rejected the read or the write
	SawLost  bool      `json:"saw_lost"` // Done closed, Err or Release reported the loss
	WriteErr string    `json:"write_err,omitempty"`
	// ReleaseErr is set when Release could not tell whether the lock was released (the reply
	// was lost): the lock then ends at its lease at the latest.
	ReleaseErr string `json:"release_err,omitempty"`
}

// Recorder collects sections from any number of goroutines.
type Recorder struct {
	mu       sync.Mutex
	sections []Section
	enc      *json.Encoder // also stream them out, for worker processes
}

// NewRecorder returns a Recorder; if w is not nil, every section is also written to it as a
// JSON line.
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{}
	if w != nil {
		r.enc = json.NewEncoder(w)
	}
	return r
}

// Add records s.
func (r *Recorder) Add(s Section) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sections = append(r.sections, s)
	if r.enc != nil {
		_ = r.enc.Encode(s)
	}
}

// AddJSON records the JSON-lines output of a worker process.
func (r *Recorder) AddJSON(rd io.Reader) error {
	dec := json.NewDecoder(rd)
	for {
		var s Section
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		r.Add(s)
	}
}

// Sections returns what was recorded so far.
func (r *Recorder) Sections() []Section {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Section(nil), r.sections...)
}

// Worker runs the bank workload: lock, read, think, write balance+1, release.
type Worker struct {
	Name   string
	Locks  *dlock.Client
	Store  *Store
	Key    string
	Think  time.Duration // time between the read and the write
	Wait   time.Duration // bound of one Acquire
	Record *Recorder
	OnHold func(token int64) // called when a section starts (optional)
}

// Run works until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	for ctx.Err() == nil {
		w.once(ctx)
	}
}

// once is one critical section. The write is attempted even when the lock was lost meanwhile,
// as a paused process would: fencing must reject it.
func (w *Worker) once(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, w.Wait)
	lock, err := w.Locks.Acquire(actx, w.Key)
	cancel()
	if err != nil {
		if !errors.Is(err, dlock.ErrNotObtained) && ctx.Err() == nil {
			pause(ctx, 20*time.Millisecond) // Redis down: do not spin
		}
		return
	}
	s := Section{Holder: w.Name, Token: lock.Token(), Start: time.Now()}
	if w.OnHold != nil {
		w.OnHold(s.Token)
	}
	// The store is another server: its calls use a context the fault cannot cancel.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	v, err := w.Store.Read(sctx, s.Token)
	if err == nil {
		pause(ctx, w.Think)
		err = w.Store.Write(sctx, s.Token, v+1)
	}
	s.End = time.Now()
	switch {
	case err == nil:
		s.Acked = true
	case errors.Is(err, ErrFenced):
		s.Fenced = true
	default:
		s.WriteErr = err.Error()
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	rerr := lock.Release(rctx)
	rcancel()
	s.SawLost = errors.Is(lock.Err(), dlock.ErrLockLost) || errors.Is(rerr, dlock.ErrLockLost)
	if errors.Is(rerr, dlock.ErrUnavailable) {
		s.ReleaseErr = rerr.Error()
	}
	w.Record.Add(s)
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
