// Package keyfunc derives lock keys from request or task data: which payment, which
// account, which client-chosen Idempotency-Key. It imports only the standard library, so
// any framework can feed it through a small adapter implementing Source (ginlock does it
// for Gin requests, asynqlock for asynq tasks; MapSource serves tests).
//
// A key function is built once, from parts, and used for every request:
//
//	var payKey = keyfunc.MustTemplate("pay:{order}:{key}", map[string]keyfunc.Part{
//		"order": keyfunc.JSON("order.id"),
//		"key":   keyfunc.IdempotencyKey(),
//	}).Scope(keyfunc.Meta(keyfunc.MetaRoute), keyfunc.ContextValue(userKey{}).Named("user"))
//
//	key, err := payKey.Key(src) // "%2Fpay:42|pay:A-17:3f9c...", or a *PartError
//
// # Parts
//
// Parts read a path parameter (Param), query parameter (Query), header (Header,
// IdempotencyKey), body field (JSON, Form), adapter metadata (Meta), a context value
// (ContextValue), a constant (Const), a hash of the canonical body (BodyHash) or anything
// else (From). Parts are required unless Optional; Named sets the name errors report.
// A part's text is compared byte for byte ("042" and "42" are two values); Integer reads a
// value the handler parses as a number in canonical form, so those two give one key.
// The body is read at most once per Key call, however many parts use it. A part no request
// can carry panics when it is built: an empty name, a Header name that is not a token, a
// Const that Integer cannot read.
//
// # Key grammar
//
//	key     = [ scope "|" ] body           ; scope from Func.Scope, body from Join or Template
//	scope   = value *( ":" value )
//	body    = lit value *( sep value ) lit ; Join: lit = "", sep = ":"
//	value   = escaped / hashed / missing
//	escaped = *( safe / "%" HEX HEX )      ; safe = A-Z a-z 0-9 "-" "." "_"; HEX upper-case
//	hashed  = "#" 22base64url              ; SHA-256 of the raw value (132 bits)
//	missing = "~"                          ; an absent Optional part
//
// A value is escaped (every byte outside safe, including '%', ':', '|', '{', '}', '#', '~',
// whitespace, control and non-ASCII bytes, becomes %XX); when the escaped form is longer
// than the hash threshold (DefaultHashAbove, 64 bytes) the value is hashed instead. A key
// longer than its bound (DefaultMaxKeyLen, 256 bytes) keeps its first bound-23 bytes and
// ends with "#" and a 22-character hash of the whole key. Hashes are domain-separated, so a
// hashed value, a hashed key tail and BodyHash never share an input.
//
// # Guarantees
//
//   - Deterministic: the same input gives the same key, across processes and versions of
//     this major version.
//   - Unambiguous: within one Func, different value tuples give different keys (up to
//     SHA-256 collisions of hashed values): values never contain a separator, Template
//     rejects placeholders not separated by such a byte, and "~" (absent) differs from
//     every present value, "" included.
//   - Scoped: a Func with a Scope never yields another scope's key, whatever the unscoped
//     parts hold; the scope segment ends at the first '|'. Keys of different Funcs may meet;
//     give each route or job its own scope (Meta(MetaRoute), a Const) when they share a
//     lock space.
//   - Bounded: every key is at most its bound long and holds only printable ASCII, never
//     '{' or '}' (the lock layer wraps keys in Redis Cluster hash tags) nor whitespace.
//   - Values over a part's hard cap fail with ErrTooLong (ErrContextValue for a context
//     value) rather than being hashed: DefaultMaxLen (1024 bytes), DefaultMaxHeaderLen (255;
//     also IdempotencyKey) and DefaultMaxBodyLen (4096; JSON and Form fields).
//   - JSON bodies are decoded with exact numbers and at most MaxJSONDepth (64) levels of
//     nesting; numbers are rendered canonically, so every spelling of one number gives one
//     key (1e2, 100, 100.0, 1E+2, 1000e-1). The bound is on the value, whatever the spelling:
//     a nonzero number of magnitude below 1e-999999999, or 1e1000000000 and above, fails
//     the part that reads it (ErrInvalid; 0.1e1000000000 is 1e999999999 and accepted). Exact:
//     42 and 42.0000000000000001 are two keys, though a handler decoding into float64 sees
//     one number; decode ids exactly (int64, json.Number) so handler and key agree. A body
//     with a string escaping an unpaired UTF-16 surrogate ("\ud800"), which encoding/json
//     reads as U+FFFD like "\ufffd", is refused (ErrInvalid; BodyHash hashes it raw), so
//     such strings never share a key.
//
// # Errors
//
// Key's errors are *PartError values naming the part. IsInputError tells the input's
// faults (ErrMissing, ErrInvalid, ErrTooLong, ErrMalformedBody, ErrBodyTooLarge: an HTTP
// adapter's 400 or 413, a task adapter's archive) from the rest (a From function's error,
// a body that could not be read, a context value ContextValue cannot use: of an unsupported
// type, ErrUnsupportedType, or over its cap or not an integer for Integer, ErrContextValue),
// which are the server's or may pass on a retry.
//
// # Limits
//
// keyfunc does not cap the body: the adapter does, and reports ErrBodyTooLarge. Form reads a
// multipart form's fields as ParseMultipartForm does, unless the adapter serves them through
// KindForm; BodyHash hashes multipart forms by their parts, in the order sent. Text is not normalized: "é" as one code point and as "e" and
// a combining accent, or "ABC" and "abc", are two values, as they are two strings to a Go
// handler; where the handler's store folds them, fold them in a From part. JSON paths cannot
// name members containing '.'; use From for those. JSON member names match ignoring case, as
// encoding/json fills a handler's struct, so the key names what the handler reads; a body with
// two members that match one path segment, or with one member name twice in an object, is
// refused. Form reads the body only where net/http's ParseForm does, and refuses a field the
// query and the body give different values. Keys are not secret: hashing hides long values,
// not short ones (use HashAbove(0) to hash every value of a part).
package keyfunc
