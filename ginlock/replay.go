package ginlock

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/keyfunc"
)

// ReplayedHeader marks a response served from the replay store instead of the handler.
const ReplayedHeader = "Idempotent-Replayed"

// bodyHash is keyfunc's canonical body hash (JSON with sorted keys and canonical numbers, raw
// bytes otherwise), so the fingerprint ignores what JSON does not mean: key order, spacing.
var bodyHash = keyfunc.Join(keyfunc.BodyHash())

// requestPrint is what a request asks for, as its fingerprint covers it: method, route, path
// (decoded and cleaned, as Gin routes it, so path parameters count however they are spelled:
// /accounts/%31 and /accounts//1 are /accounts/1), query
// (decoded, parameters sorted by name) and canonical body. A replay is served only to a
// request with the same fingerprint.
type requestPrint struct{ method, route, path, query, body string }

func fingerprint(c *gin.Context, src *Source) (requestPrint, error) {
	body, err := bodyHash.Key(src)
	if err != nil {
		return requestPrint{}, err
	}
	u := c.Request.URL
	return requestPrint{c.Request.Method, c.FullPath(), cleanPath(u.Path), u.Query().Encode(), body}, nil
}

// sum is the fingerprint stored with a response: SHA-256 of the print's fields.
func (p requestPrint) sum() [sha256.Size]byte {
	return sumFields(p.method, p.route, p.path, p.query, p.body)
}

// matches reports whether r was stored for a request with print p. A version 1 record's
// fingerprint covers method, route and body only.
func (r *record) matches(p requestPrint) bool {
	if r.legacy {
		return r.fingerprint == sumFields(p.method, p.route, p.body)
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
	legacy      bool // a version 1 record: its fingerprint has no path and query
	status      int
	header      http.Header
	body        []byte
}

// recordVersion starts every encoded record, so a later layout can tell old records apart.
// Version 2 added path and query to the fingerprint; version 1 records, written by earlier
// releases and kept for their retention, are still read and matched the old way.
const recordVersion = 2

// Layout: version, fingerprint, uvarint status, uvarint header count, per header its name and
// uvarint value count and values (strings as uvarint length + bytes), then the body.
func (r *record) marshal() []byte {
	b := make([]byte, 0, 1+sha256.Size+16+len(r.body)+64)
	b = append(b, recordVersion)
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
	return append(b, r.body...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func unmarshalRecord(b []byte) (*record, error) {
	d := decoder{b: b}
	v := d.byte()
	if v != recordVersion && v != 1 {
		return nil, ErrBadRecord
	}
	r := &record{legacy: v == 1}
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
