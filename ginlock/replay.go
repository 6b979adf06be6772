package ginlock

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/keyfunc"
)

// ReplayedHeader marks a response served from the replay store instead of the handler.
const ReplayedHeader = "Idempotent-Replayed"

// bodyHash is keyfunc's canonical body hash (JSON with sorted keys and canonical numbers, raw
// bytes otherwise), so the fingerprint ignores what JSON does not mean: key order, spacing.
var bodyHash = keyfunc.Join(keyfunc.BodyHash())

// requestPrint is what a request asks for, as its fingerprint covers it: method, route, the
// path as the handler sees it (params), query (decoded, parameters sorted by name) and
// canonical body. A replay is served only to a request with the same fingerprint.
//
// params are the route's parameter values as Gin gave them: /accounts/%31 and /accounts/1
// are the same request (both give id 1), and so is /accounts//1 where Gin cleans the path
// before routing (RemoveExtraSlash); a catch-all parameter keeps repeated slashes, and
// UseRawPath keeps an encoded slash apart, so /files/a//b and /files/a/b are two. Without a
// matched route they are the decoded path as sent. path, the decoded path cleaned, is for
// records of version 2.
type requestPrint struct{ method, route, params, path, query, body string }

func fingerprint(c *gin.Context, src *Source) (requestPrint, error) {
	body, err := bodyHash.Key(src)
	if err != nil {
		return requestPrint{}, err
	}
	u := c.Request.URL
	route := c.FullPath()
	params := u.Path
	if route != "" {
		var b []byte
		for _, p := range c.Params {
			b = appendString(appendString(b, p.Key), p.Value)
		}
		params = string(b)
	}
	return requestPrint{c.Request.Method, route, params, cleanPath(u.Path), u.Query().Encode(), body}, nil
}

// sum is the fingerprint stored with a response: SHA-256 of the print's fields.
func (p requestPrint) sum() [sha256.Size]byte {
	return sumFields(p.method, p.route, p.params, p.query, p.body)
}

// matches reports whether r was stored for a request with print p. A version 1 record's
// fingerprint covers method, route and body only; a version 2 record's, the cleaned path in
// place of the parameters.
func (r *record) matches(p requestPrint) bool {
	switch r.version {
	case 1:
		return r.fingerprint == sumFields(p.method, p.route, p.body)
	case 2:
		return r.fingerprint == sumFields(p.method, p.route, p.path, p.query, p.body)
	}
	return r.fingerprint == p.sum()
}

// sumFields is the SHA-256 of fields, each preceded by its length (uvarint). The input is
// put together in one buffer, on the stack for the usual short fields.
func sumFields(fields ...string) [sha256.Size]byte {
	var buf [256]byte
	b := buf[:0]
	for _, s := range fields {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return sha256.Sum256(b)
}

// record is a stored response.
type record struct {
	fingerprint [sha256.Size]byte
	version     byte // of the stored layout, which says what the fingerprint covers (matches)
	status      int
	header      http.Header
	added       []string // headers whose values the chain added to those set before it
	body        []byte
}

// recordVersion starts every encoded record, so a later layout can tell old records apart.
// Version 2 added path and query to the fingerprint, version 3 put the route's parameters in
// place of the cleaned path, version 4 added the names of the headers the chain added to
// (record.added); records of versions 1 to 3, written by earlier releases and kept for their
// retention, are still read (1 and 2 matched the old way). A record without such headers is
// written as version 3, which the releases before version 4 read too (during a rolling
// deploy they answer a record they cannot read with 500).
const recordVersion = 4

// Layout: version, fingerprint, uvarint status, uvarint header count, per header its name and
// uvarint value count and values (strings as uvarint length + bytes), uvarint count of added
// names and the names (version 4 only), then the body.
func (r *record) marshal() []byte {
	b := make([]byte, 0, 1+sha256.Size+16+len(r.body)+64)
	version := byte(recordVersion)
	if len(r.added) == 0 {
		version = 3
	}
	b = append(b, version)
	b = append(b, r.fingerprint[:]...)
	b = binary.AppendUvarint(b, uint64(r.status))
	b = binary.AppendUvarint(b, uint64(len(r.header)))
	for name, vals := range r.header {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(vals)))
		for _, v := range vals {
			b = appendString(b, v)
		}
	}
	if version >= 4 {
		b = binary.AppendUvarint(b, uint64(len(r.added)))
		for _, name := range r.added {
			b = appendString(b, name)
		}
	}
	return append(b, r.body...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func unmarshalRecord(b []byte) (*record, error) {
	d := decoder{b: b}
	v := d.byte()
	if v < 1 || v > recordVersion {
		return nil, ErrBadRecord
	}
	r := &record{version: v}
	copy(r.fingerprint[:], d.bytes(sha256.Size))
	r.status = int(d.uvarint(999))
	n := d.uvarint(uint64(len(d.b)))
	r.header = make(http.Header, n)
	for range n {
		name := d.string()
		vals := make([]string, d.uvarint(uint64(len(d.b))))
		for i := range vals {
			vals[i] = d.string()
		}
		r.header[name] = vals
	}
	if v >= 4 {
		r.added = make([]string, d.uvarint(uint64(len(d.b))))
		for i := range r.added {
			r.added[i] = d.string()
		}
	}
	r.body = d.b
	if d.bad || r.status < 100 {
		return nil, ErrBadRecord
	}
	return r, nil
}

// decoder reads a record; any error sets bad and makes every later read return zero values.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) byte() byte {
	if b := d.bytes(1); len(b) == 1 {
		return b[0]
	}
	return 0
}

func (d *decoder) bytes(n int) []byte {
	if d.bad || n > len(d.b) {
		d.bad = true
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// uvarint reads a number no larger than limit.
func (d *decoder) uvarint(limit uint64) uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	return string(d.bytes(int(d.uvarint(uint64(len(d.b))))))
}

// replay writes a stored response, marked with ReplayedHeader, and aborts the chain. A body
// stored compressed is decoded for a request that does not accept its encoding (forClient).
func replay(c *gin.Context, r *record) {
	header, body := forClient(r.header, r.body, c.GetHeader("Accept-Encoding"))
	h := c.Writer.Header()
	for name, vals := range header {
		if name == "Set-Cookie" || slices.Contains(r.added, name) {
			// Cookies add up, and so do values the chain added to those a middleware before
			// ginlock set (Vary: Origin from a CORS middleware): the retry's own stay beside
			// the stored ones, as they did beside the chain's in the first answer.
			h[name] = append(h[name], vals...)
			continue
		}
		h[name] = vals
	}
	h.Set(ReplayedHeader, "true")
	c.Status(r.status)
	c.Abort()
	c.Writer.WriteHeaderNow()
	if len(body) > 0 {
		_, _ = c.Writer.Write(body)
	}
}
