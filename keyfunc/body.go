package keyfunc

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
)

// eval is the state of one Key call: the body is read, parsed as JSON and parsed as a form
// at most once each, however many parts use it.
type eval struct {
	src Source

	bodyRead bool
	body     []byte
	bodyErr  error

	jsonDone bool
	jsonVal  any // nil for an empty body
	jsonErr  error

	formDone bool
	formVals url.Values
	formErr  error
}

func (e *eval) readBody() ([]byte, error) {
	if !e.bodyRead {
		e.bodyRead = true
		e.body, e.bodyErr = e.src.Body()
	}
	return e.body, e.bodyErr
}

// parsedJSON returns the parsed body; nil (no error) when the body is empty or only whitespace.
func (e *eval) parsedJSON() (any, error) {
	if e.jsonDone {
		return e.jsonVal, e.jsonErr
	}
	e.jsonDone = true
	body, err := e.readBody()
	if err != nil {
		e.jsonErr = err
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	e.jsonVal, e.jsonErr = parseJSON(body)
	if e.jsonErr != nil {
		if first := bytes.TrimLeft(body, " \t\r\n"); first[0] != '{' && first[0] != '[' {
			e.jsonErr = &notJSONError{e.jsonErr}
		}
	}
	return e.jsonVal, e.jsonErr
}

// notJSONError is the parse error of a body that does not start like a JSON object or array:
// an optional JSON part counts it as absent.
type notJSONError struct{ err error }

func (e *notJSONError) Error() string { return e.err.Error() }
func (e *notJSONError) Unwrap() error { return e.err }

func (e *eval) parsedForm() (url.Values, error) {
	if e.formDone {
		return e.formVals, e.formErr
	}
	e.formDone = true
	body, err := e.readBody()
	if err != nil {
		e.formErr = err
		return nil, err
	}
	// The pairs that parse, as net/http's ParseForm gives them to the handler: a pair with a
	// bad escape or a ';' is skipped there, so it must not make the others unreadable here.
	e.formVals, _ = url.ParseQuery(string(body))
	return e.formVals, nil
}

// bodyHash hashes the canonical JSON of the body when it parses, the raw bytes otherwise.
func (e *eval) bodyHash() (string, bool, error) {
	body, err := e.readBody()
	if err != nil {
		return "", false, err
	}
	domain, data := domainRaw, body
	if v, err := e.parsedJSON(); err == nil && v != nil {
		if canon, err := appendCanonical(nil, v); err == nil {
			domain, data = domainJSON, canon
		}
	}
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write(data)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), true, nil
}
