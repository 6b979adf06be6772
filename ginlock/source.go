package ginlock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/keyfunc"
)

// Source is the keyfunc.Source of a Gin request. It serves
//
//   - KindParam: path parameters (c.Params);
//   - KindQuery: the first value of a query parameter;
//   - KindHeader: the first value of a request header (Values gives every line, so that
//     keyfunc.IdempotencyKey refuses a key sent twice);
//   - KindForm: fields of a multipart/form-data body (files are ignored); keyfunc itself
//     parses application/x-www-form-urlencoded bodies. When a handler before ginlock parsed
//     the form already (c.PostForm, r.FormValue), which reads the body to its end, the
//     fields come from that parse (c.Request.PostForm), as the handler sees them;
//   - KindMeta: keyfunc.MetaMethod, keyfunc.MetaRoute (c.FullPath(), absent for unmatched
//     routes) and keyfunc.MetaPath (the decoded path, as Gin routes it: /accounts/%31 and
//     /accounts/1 reach the same handler, so they must share a lock; /a%2Fb and /a/b then
//     share one too, which over-locks but never lets a request past a lock; repeated
//     slashes and dot segments are resolved, as Gin's RemoveExtraSlash routes them);
//   - Context: the request context, except that string keys are looked up in the Gin
//     context's Keys first (c.Set), so keyfunc.ContextValue("user") reads what an auth
//     middleware stored with c.Set("user", id);
//   - Body: the request body, read once and at most the cap, then put back in
//     c.Request.Body and under gin.BodyBytesKey so c.ShouldBindBodyWith reuses it. A body
//     parsed as a form before ginlock is rebuilt from that parse (see KindForm): its
//     fields URL-encoded, names sorted, and for a multipart form each file's name,
//     Content-Type and content hash; the replay fingerprint covers that.
//
// A Source belongs to one request and is not safe for concurrent use.
type Source struct {
	c       *gin.Context
	maxBody int64

	bodyRead bool
	body     []byte
	bodyErr  error

	formRead bool
	form     url.Values
}

var _ keyfunc.MultiValueSource = (*Source)(nil)

// NewSource returns the Source of c, reading at most maxBody bytes of body (<= 0:
// DefaultMaxBody). Handlers can use it to derive the keys of nested locks the same way the
// middleware does. It panics if c is nil, rather than leave the Source to fail at its first
// use.
func NewSource(c *gin.Context, maxBody int64) *Source {
	if c == nil {
		panic("ginlock: NewSource with a nil *gin.Context")
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	return &Source{c: c, maxBody: maxBody}
}

// Context returns the request context, with string keys looked up in c.Keys first.
func (s *Source) Context() context.Context {
	return ginValues{Context: s.c.Request.Context(), c: s.c}
}

// ginValues resolves string keys the way gin.Context.Value does, without requiring the
// engine's ContextWithFallback.
type ginValues struct {
	context.Context
	c *gin.Context
}

func (v ginValues) Value(key any) any {
	if k, ok := key.(string); ok {
		if val, ok := v.c.Get(k); ok {
			return val
		}
	}
	return v.Context.Value(key)
}

// Value returns the named value of kind; see Source for what each kind reads.
func (s *Source) Value(kind keyfunc.Kind, name string) (string, bool) {
	c := s.c
	switch kind {
	case keyfunc.KindParam:
		return c.Params.Get(name)
	case keyfunc.KindQuery:
		return c.GetQuery(name)
	case keyfunc.KindHeader:
		if vs := c.Request.Header.Values(name); len(vs) > 0 {
			return vs[0], true
		}
	case keyfunc.KindForm:
		form := s.multipartForm()
		if s.formParsedBefore() {
			form = c.Request.PostForm
		}
		if vs := form[name]; len(vs) > 0 {
			return vs[0], true
		}
	case keyfunc.KindMeta:
		switch name {
		case keyfunc.MetaMethod:
			return c.Request.Method, true
		case keyfunc.MetaRoute:
			route := c.FullPath()
			return route, route != ""
		case keyfunc.MetaPath:
			return cleanPath(c.Request.URL.Path), true
		}
	}
	return "", false
}

// cleanPath resolves repeated slashes and "." and ".." segments, keeping a trailing slash, as
// Gin does before routing when RemoveExtraSlash is set: /accounts//1 then reaches the handler
// of /accounts/1. Without that setting such a path matches no route, so cleaning it costs
// nothing; a catch-all route that tells them apart shares one lock between them, which
// over-locks but never lets a request past a lock.
func cleanPath(p string) string {
	if p == "" {
		return p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// bodyTooLargeError reports a body over the cap; it matches keyfunc.ErrBodyTooLarge.
type bodyTooLargeError struct{ limit int64 }

func (e *bodyTooLargeError) Error() string {
	return fmt.Sprintf("ginlock: request body larger than %d bytes", e.limit)
}

func (e *bodyTooLargeError) Is(target error) bool { return target == keyfunc.ErrBodyTooLarge }

// bodyReadError reports a body that could not be read to its end (the client went away or
// sent less than it announced): the request's fault, answered 400.
type bodyReadError struct{ err error }

func (e *bodyReadError) Error() string { return "ginlock: read request body: " + e.err.Error() }
func (e *bodyReadError) Unwrap() error { return e.err }

// Body reads the request body once. Over the cap it returns an error matching
// keyfunc.ErrBodyTooLarge and leaves the body consumed (the middleware answers 413).
func (s *Source) Body() ([]byte, error) {
	if s.bodyRead {
		return s.body, s.bodyErr
	}
	s.bodyRead = true
	s.body, s.bodyErr = s.readBody()
	return s.body, s.bodyErr
}

func (s *Source) readBody() ([]byte, error) {
	c := s.c
	if v, ok := c.Get(gin.BodyBytesKey); ok {
		if b, ok := v.([]byte); ok {
			if int64(len(b)) > s.maxBody {
				return nil, &bodyTooLargeError{s.maxBody}
			}
			return b, nil
		}
	}
	if s.formParsedBefore() {
		return s.parsedFormBody()
	}
	req := c.Request
	if req.ContentLength > s.maxBody {
		return nil, &bodyTooLargeError{s.maxBody}
	}
	var b []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		b, err = io.ReadAll(io.LimitReader(req.Body, min(s.maxBody, math.MaxInt64-1)+1)) // no overflow at MaxInt64
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe): // a smaller cap set before us, by http.MaxBytesReader
			return nil, &bodyTooLargeError{mbe.Limit}
		case err != nil:
			return nil, &bodyReadError{err}
		}
		if int64(len(b)) > s.maxBody {
			return nil, &bodyTooLargeError{s.maxBody}
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	if b == nil {
		b = []byte{}
	}
	c.Set(gin.BodyBytesKey, b)
	return b, nil
}

// formParsedBefore reports whether a handler before ginlock (a CSRF or method-override
// middleware calling c.PostForm, or one wrapping the engine calling r.FormValue) parsed the
// body as a form: net/http then read the body to its end, and the handler reads the form
// from the request's parsed values, not from the body.
//
// A multipart form is set only by a parse that succeeded. A urlencoded one counts when it
// has fields, whatever the method is now (a method override may have turned the POST into a
// DELETE): a parse that failed (over an http.MaxBytesReader limit, the client gone) leaves
// PostForm empty, and so does an empty body; the body is then read as usual, where a failed
// read fails again and an empty or drained body reads as empty.
func (s *Source) formParsedBefore() bool {
	req := s.c.Request
	if req.MultipartForm != nil {
		return true
	}
	if len(req.PostForm) == 0 {
		return false
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded"
}

// parsedFormBody is the body of a request whose form was parsed before ginlock, rebuilt
// from what the handler sees: the fields, URL-encoded with names sorted (a urlencoded
// body's fields parse back from it as from the body), and for a multipart form, after a
// blank line, each file's field, name, Content-Type and SHA-256 of its content, so the
// fingerprint of a retry with another file differs. Over the cap (fields and file contents
// together) it is an error matching keyfunc.ErrBodyTooLarge, as the body would have been.
func (s *Source) parsedFormBody() ([]byte, error) {
	req := s.c.Request
	size := int64(0)
	for name, vs := range req.PostForm {
		for _, v := range vs {
			size += int64(len(name) + len(v))
		}
	}
	var files url.Values
	if mf := req.MultipartForm; mf != nil {
		files = url.Values{}
		for name, fhs := range mf.File {
			for _, fh := range fhs {
				size += fh.Size
				if size > s.maxBody {
					return nil, &bodyTooLargeError{s.maxBody}
				}
				sum, err := fileSum(fh)
				if err != nil {
					return nil, &bodyReadError{err}
				}
				files.Add(name, fh.Filename+"\n"+fh.Header.Get("Content-Type")+"\n"+sum)
			}
		}
	}
	if size > s.maxBody {
		return nil, &bodyTooLargeError{s.maxBody}
	}
	b := []byte(req.PostForm.Encode())
	if files != nil {
		b = append(append(b, "\n\n"...), files.Encode()...)
	}
	return b, nil
}

// fileSum is the hex SHA-256 of an uploaded file's content.
func fileSum(fh *multipart.FileHeader) (string, error) {
	f, err := fh.Open()
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// multipartForm parses the fields of a multipart/form-data body from the capped body; any
// failure leaves the form empty, and keyfunc then reports the field as missing or the body
// as unreadable.
func (s *Source) multipartForm() url.Values {
	if s.formRead {
		return s.form
	}
	s.formRead = true
	mt, params, err := mime.ParseMediaType(s.c.GetHeader("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil
	}
	body, err := s.Body()
	if err != nil {
		return nil
	}
	form := url.Values{}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := r.NextPart()
		if err != nil {
			break
		}
		if name := p.FormName(); name != "" && p.FileName() == "" {
			if v, err := io.ReadAll(p); err == nil {
				form.Add(name, string(v))
			}
		}
		_ = p.Close()
	}
	s.form = form
	return form
}

// Values returns every line of a request header (KindHeader), in order; for the other kinds
// it returns the one value Value gives, or nil.
func (s *Source) Values(kind keyfunc.Kind, name string) []string {
	if kind == keyfunc.KindHeader {
		return s.c.Request.Header.Values(name)
	}
	if v, ok := s.Value(kind, name); ok {
		return []string{v}
	}
	return nil
}
