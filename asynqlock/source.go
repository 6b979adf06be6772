package asynqlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/keyfunc"
)

// NewSource returns the keyfunc.Source the middleware derives keys from, for callers that
// want a task's key outside the middleware (logs, tests). It serves:
//
//   - keyfunc.Meta(keyfunc.MetaTaskType): task.Type()
//   - keyfunc.Meta(keyfunc.MetaTaskQueue): asynq.GetQueueName(ctx)
//   - keyfunc.Meta(keyfunc.MetaTaskID): asynq.GetTaskID(ctx)
//   - keyfunc.Header(name): the task header name (exact match first, then any case)
//   - the payload as the body, so keyfunc.JSON("account_id") reads a payload field;
//     a payload over DefaultMaxPayload bytes gives keyfunc.ErrBodyTooLarge
//
// Queue and id are absent outside a task context (a required part then fails with
// keyfunc.ErrMissing). It panics if task is nil, rather than leave the Source to fail at its
// first use.
func NewSource(ctx context.Context, task *asynq.Task) keyfunc.Source {
	if task == nil {
		panic("asynqlock: NewSource with a nil *asynq.Task")
	}
	return newSource(ctx, task, DefaultMaxPayload)
}

type source struct {
	ctx        context.Context
	task       *asynq.Task
	maxPayload int
	now        time.Time // processing time, read once so every Slot part of a key agrees
	slot       time.Time // set by a Slot part, handed to the handler through SlotStart
}

func newSource(ctx context.Context, task *asynq.Task, maxPayload int) *source {
	return &source{ctx: ctx, task: task, maxPayload: maxPayload, now: time.Now()}
}

func (s *source) Context() context.Context { return s.ctx }

func (s *source) Value(kind keyfunc.Kind, name string) (string, bool) {
	switch kind {
	case keyfunc.KindMeta:
		switch name {
		case keyfunc.MetaTaskType:
			return s.task.Type(), true
		case keyfunc.MetaTaskQueue:
			if s.ctx == nil {
				return "", false
			}
			return asynq.GetQueueName(s.ctx)
		case keyfunc.MetaTaskID:
			if s.ctx == nil {
				return "", false
			}
			return asynq.GetTaskID(s.ctx)
		}
	case keyfunc.KindHeader:
		h := s.task.Headers()
		if v, ok := h[name]; ok {
			return v, true
		}
		// Any case; of headers differing only in case, the first in byte order, so that every
		// run derives the same key (map order is random).
		match, found := "", false
		for k := range h {
			if strings.EqualFold(k, name) && (!found || k < match) {
				match, found = k, true
			}
		}
		if found {
			return h[match], true
		}
	}
	return "", false
}

func (s *source) Body() ([]byte, error) {
	p := s.task.Payload()
	if s.maxPayload > 0 && len(p) > s.maxPayload {
		return nil, fmt.Errorf("payload of %d bytes over the %d-byte cap: %w", len(p), s.maxPayload, keyfunc.ErrBodyTooLarge)
	}
	// Key functions never modify the body, and asynq hands each handler its own task.
	return p, nil
}
