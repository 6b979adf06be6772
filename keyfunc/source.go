package keyfunc

import (
	"bytes"
	"context"
	"strconv"
	"strings"
)

// Kind says where a named value comes from; see Source.Value.
type Kind uint8

// The kinds of named values a Source serves.
const (
	KindParam  Kind = iota + 1 // path parameter (":id" in a route)
	KindQuery                  // URL query parameter (first value)
	KindHeader                 // request header (first value; names are case-insensitive)
	KindForm                   // form field the adapter has already parsed (optional to support)
	KindMeta                   // adapter-defined data, see the Meta* names
)

// String returns the lower-case name of the kind ("param", "query", ...).
func (k Kind) String() string {
	switch k {
	case KindParam:
		return "param"
	case KindQuery:
		return "query"
	case KindHeader:
		return "header"
	case KindForm:
		return "form"
	case KindMeta:
		return "meta"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Metadata names adapters are expected to serve through KindMeta, so that keys written for
// one adapter read the same in another. An adapter may serve more names and documents them.
const (
	MetaMethod    = "method"     // HTTP method, e.g. "POST"
	MetaRoute     = "route"      // route pattern, e.g. "/orders/:id" (not the raw path)
	MetaPath      = "path"       // request path, in the form the adapter routes by (ginlock: decoded)
	MetaTaskType  = "task.type"  // asynq task type name
	MetaTaskQueue = "task.queue" // queue the task was taken from
	MetaTaskID    = "task.id"    // task id
)

// Source is what a framework adapter exposes to a key function: one value per request or
// task. Implementations are used by one Key call at a time and need not be safe for
// concurrent use.
type Source interface {
	// Context returns the request or task context (ContextValue parts read it). May be nil.
	Context() context.Context
	// Value returns the named value of a kind and whether it is present. A present empty
	// value ("?q=") is ("", true).
	Value(kind Kind, name string) (string, bool)
	// Body returns the whole request body or task payload. The adapter reads it at most once
	// and caps its size; over the cap it returns an error wrapping ErrBodyTooLarge. Key calls
	// Body at most once per call, and only when a body part needs it.
	Body() ([]byte, error)
}

// MultiValueSource is a Source that can also return every value of a name that a request may
// repeat (header lines). IdempotencyKey uses it to refuse a key sent on two lines; Value
// still gives the first value to every other part.
type MultiValueSource interface {
	Source
	// Values returns every value of the named value of kind, in order; nil when absent.
	Values(kind Kind, name string) []string
}

// MapSource is a Source backed by maps, for tests of key functions and for callers that
// derive keys outside any framework. The zero value is an empty source with a nil context.
// Header names are matched case-insensitively (an exact match first; among names that differ
// only in case, the first in byte order, so a key never depends on map order); every other
// name exactly.
type MapSource struct {
	Ctx     context.Context   // returned by Context
	Params  map[string]string // KindParam values
	Query   map[string]string // KindQuery values
	Header  map[string]string // KindHeader values (names matched as above)
	Form    map[string]string // KindForm values
	Meta    map[string]string // KindMeta values
	Payload []byte            // returned by Body
	BodyErr error             // when set, Body returns it instead of Payload
}

// Context returns s.Ctx.
func (s *MapSource) Context() context.Context { return s.Ctx }

// Value looks name up in the map for kind.
func (s *MapSource) Value(kind Kind, name string) (string, bool) {
	var m map[string]string
	switch kind {
	case KindParam:
		m = s.Params
	case KindQuery:
		m = s.Query
	case KindForm:
		m = s.Form
	case KindMeta:
		m = s.Meta
	case KindHeader:
		if v, ok := s.Header[name]; ok {
			return v, true
		}
		best, found := "", false
		for k := range s.Header {
			if strings.EqualFold(k, name) && (!found || k < best) {
				best, found = k, true
			}
		}
		return s.Header[best], found
	}
	v, ok := m[name]
	return v, ok
}

// Body returns a copy of s.Payload, or s.BodyErr when it is set.
func (s *MapSource) Body() ([]byte, error) {
	if s.BodyErr != nil {
		return nil, s.BodyErr
	}
	return bytes.Clone(s.Payload), nil
}
