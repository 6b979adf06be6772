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

// fingerprint identifies what a request asks for: SHA-256 of method, route, path (so path
// parameters count), query (parameters sorted by name) and canonical body. A replay is
// served only to a request with the same fingerprint.
func fingerprint(c *gin.Context, src *Source) ([sha256.Size]byte, error) {
	body, err := bodyHash.Key(src)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	u := c.Request.URL
	h := sha256.New()
	for _, s := range []string{c.Request.Method, c.FullPath(), u.EscapedPath(), u.Query().Encode(), body} {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	var fp [sha256.Size]byte
	h.Sum(fp[:0])
	return fp, nil
}

// record is a stored response.
type record struct {
	fingerprint [sha256.Size]byte
	status      int
	header      http.Header
	body        []byte
}

// recordVersion starts every encoded record, so a later layout can tell old records apart.
const recordVersion = 1

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
	if d.byte() != recordVersion {
		return nil, ErrBadRecord
	}
	r := &record{}
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

// replay writes a stored response, marked with ReplayedHeader, and aborts the chain.
func replay(c *gin.Context, r *record) {
	h := c.Writer.Header()
	for name, vals := range r.header {
		h[name] = vals
	}
	h.Set(ReplayedHeader, "true")
	c.Status(r.status)
	c.Abort()
	c.Writer.WriteHeaderNow()
	if len(r.body) > 0 {
		_, _ = c.Writer.Write(r.body)
	}
}
