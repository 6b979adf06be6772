package keyfunc

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors. Key wraps every per-part failure in a *PartError whose Unwrap returns
// (an error wrapping) one of these, so callers test with errors.Is and name the part with
// errors.As. A middleware typically maps ErrBodyTooLarge to 413, the other input errors (see
// IsInputError) to 400, and ErrUnsupportedType and ErrContextValue, like any other error,
// to 500.
var (
	// ErrMissing: a required part has no value in the request or task.
	ErrMissing = errors.New("keyfunc: missing value")
	// ErrInvalid: a value is present but unusable: a malformed Idempotency-Key, a value that
	// is not an integer for an Integer part, a form field the query and the body give
	// different values, a JSON number out of range (nonzero and of magnitude below
	// 1e-999999999 or from 1e1000000000 up), or a JSON body no key can read as a handler
	// would (a repeated member, two members matching one path segment, a lone surrogate escape).
	ErrInvalid = errors.New("keyfunc: invalid value")
	// ErrUnsupportedType: a context value is of a type ContextValue cannot read (the server's
	// auth step stored, say, a struct): the server's mistake, not the request's, so it is not
	// an input error (see IsInputError).
	ErrUnsupportedType = errors.New("keyfunc: context value of an unsupported type")
	// ErrContextValue: a context value of a supported type is unusable: longer than its
	// part's cap, or not an integer for an Integer part. The server set it (an auth step),
	// the request did not send it, so it is not an input error (see IsInputError): a 400
	// would blame a client that can do nothing about it.
	ErrContextValue = errors.New("keyfunc: unusable context value")
	// ErrTooLong: a value is longer than its part's hard cap (see Part.MaxLen).
	ErrTooLong = errors.New("keyfunc: value too long")
	// ErrBodyTooLarge: returned (wrapped) by Source.Body when the body exceeds the adapter's cap.
	ErrBodyTooLarge = errors.New("keyfunc: body too large")
	// ErrMalformedBody: a JSON part could not parse the body (not JSON, not UTF-8, nested
	// deeper than MaxJSONDepth); an optional one only when the body starts like JSON (see
	// Part.Optional). Form parts never fail so: they skip what does not parse, as ParseForm does.
	ErrMalformedBody = errors.New("keyfunc: malformed body")
	// ErrTemplate: Template was given a template that cannot produce unambiguous keys.
	ErrTemplate = errors.New("keyfunc: bad template")
)

// IsInputError reports whether err, from Func.Key, is the fault of the request or task
// itself: it wraps ErrMissing, ErrInvalid, ErrTooLong, ErrMalformedBody or ErrBodyTooLarge,
// so the same input fails the same way again. Anything else (the error of a From function, a
// body that could not be read, a context value ContextValue cannot use: ErrUnsupportedType,
// ErrContextValue) is the server's or may pass on a retry. An HTTP adapter answers the first
// kind with 400 (413 for ErrBodyTooLarge) and the other with a server error; a task adapter
// archives the first kind and retries the other.
func IsInputError(err error) bool {
	for _, s := range [...]error{ErrMissing, ErrInvalid, ErrTooLong, ErrMalformedBody, ErrBodyTooLarge} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// PartError reports which part of a key could not be derived. Part is the part's name
// (see Part.Named); Err wraps one of the sentinel errors above, or the error of a From
// function or of Source.Body.
type PartError struct {
	Part string
	Err  error
}

// Error names the part, e.g. `keyfunc: part "order": missing value`.
func (e *PartError) Error() string {
	msg := "<nil>"
	if e.Err != nil {
		msg = strings.TrimPrefix(e.Err.Error(), "keyfunc: ")
	}
	return "keyfunc: part " + strconv.Quote(e.Part) + ": " + msg
}

// Unwrap returns the underlying error, so errors.Is(err, ErrMissing) works through it.
func (e *PartError) Unwrap() error { return e.Err }
