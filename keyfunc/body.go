package keyfunc

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/url"
	"slices"
	"strings"
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

// parsedJSON returns the parsed body; nil (no error) when the body is empty or only JSON
// whitespace (a body of other whitespace, such as a form feed, is not JSON), and for a JSON
// null (see jsonEmpty).
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
	if jsonEmpty(body) {
		return nil, nil
	}
	e.jsonVal, e.jsonErr = parseJSON(body)
	// Only a body that does not parse may be "not JSON": one that parses and is refused (a
	// top-level string with a lone surrogate) must not read as absent, the key of no body.
	if errors.Is(e.jsonErr, ErrMalformedBody) {
		if first := bytes.TrimLeft(body, " \t\r\n"); first[0] != '{' && first[0] != '[' {
			e.jsonErr = &notJSONError{e.jsonErr}
		}
	}
	return e.jsonVal, e.jsonErr
}

// jsonEmpty reports whether body holds nothing but JSON whitespace (RFC 8259: space, tab,
// line feed, carriage return).
func jsonEmpty(body []byte) bool { return len(bytes.Trim(body, " \t\r\n")) == 0 }

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

// canonicalMultipart is a multipart/form-data body (as its Content-Type header names it,
// with a boundary) without what a client picks anew for each encoding: the boundary, and the
// preamble and epilogue around the parts. Each part is its Content-Disposition (type and
// parameters, sorted), its other headers (names sorted, values in order) and its content,
// as a handler reads them (multipart.Reader decodes quoted-printable and drops that
// Content-Transfer-Encoding), length-prefixed, in order. false when the body is not such a body or
// does not parse: it is then hashed raw.
func (e *eval) canonicalMultipart(body []byte) ([]byte, bool) {
	ct, ok := e.src.Value(KindHeader, "Content-Type")
	if !ok {
		return nil, false
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, false
	}
	var out []byte
	field := func(b []byte) { out = append(binary.AppendUvarint(out, uint64(len(b))), b...) }
	err = eachPart(body, params["boundary"], func(part *multipart.Part, content []byte) bool {
		disp, dparams, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil {
			return false
		}
		field([]byte(strings.ToLower(disp)))
		names := slices.Sorted(maps.Keys(dparams))
		out = binary.AppendUvarint(out, uint64(len(names)))
		for _, n := range names {
			field([]byte(n))
			field([]byte(dparams[n]))
		}
		// Every other header of the part, as a handler sees it (multipart.FileHeader.Header):
		// names sorted, values in order.
		others := slices.Sorted(maps.Keys(part.Header))
		others = slices.DeleteFunc(others, func(n string) bool { return n == "Content-Disposition" })
		out = binary.AppendUvarint(out, uint64(len(others)))
		for _, n := range others {
			field([]byte(n))
			out = binary.AppendUvarint(out, uint64(len(part.Header[n])))
			for _, v := range part.Header[n] {
				field([]byte(v))
			}
		}
		field(content)
		return true
	})
	if err != nil {
		return nil, false
	}
	return out, out != nil
}

// multipartValue is the first value of form field name in a multipart/form-data body with
// boundary, as ParseMultipartForm gives it to a handler (c.PostForm): the content of the
// first part with that form name and no file name, decoded as multipart.Reader decodes it.
// The whole body must parse, as it must for ParseMultipartForm, which otherwise gives the
// handler no field at all.
func multipartValue(body []byte, boundary, name string) (value string, found bool, err error) {
	err = eachPart(body, boundary, func(part *multipart.Part, content []byte) bool {
		if !found && part.FormName() == name && part.FileName() == "" {
			value, found = string(content), true
		}
		return true
	})
	if err != nil {
		return "", false, fmt.Errorf("%w: multipart body does not parse", ErrMalformedBody)
	}
	return value, found, nil
}

// errPartRefused is eachPart's error when its fn refused a part.
var errPartRefused = errors.New("part refused")

// eachPart calls fn with each part of a multipart body with boundary and its content, decoded
// as multipart.Reader decodes it, in order, until fn returns false (errPartRefused). It fails
// when the body does not parse to its end, or has no boundary.
func eachPart(body []byte, boundary string, fn func(part *multipart.Part, content []byte) bool) error {
	if boundary == "" {
		return errors.New("no boundary")
	}
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := r.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		content, err := io.ReadAll(part)
		if err != nil {
			return err
		}
		if !fn(part, content) {
			return errPartRefused
		}
	}
}

// bodyHash hashes the canonical JSON of the body when it parses, the canonical parts of a
// multipart/form-data body, and the raw bytes otherwise.
func (e *eval) bodyHash() (string, bool, error) {
	body, err := e.readBody()
	if err != nil {
		return "", false, err
	}
	domain, data := domainRaw, body
	if v, err := e.parsedJSON(); err == nil && !jsonEmpty(body) { // v is nil for a JSON null
		// The canonical text is rarely longer than the body it compacts.
		if canon, err := appendCanonical(make([]byte, 0, len(body)), v); err == nil {
			domain, data = domainJSON, canon
		}
	} else if canon, ok := e.canonicalMultipart(body); ok {
		domain, data = domainParts, canon
	}
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write(data)
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])), true, nil
}
