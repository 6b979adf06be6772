package ginlock

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxDecodedReplay bounds the body a stored compressed response is decoded to for a retry
// that does not accept its encoding; a larger one is replayed as stored.
const maxDecodedReplay = 16 << 20

// forClient returns the stored header and body to replay to a request whose Accept-Encoding
// is accept. A body stored with a Content-Encoding the request does not accept (a compressing
// middleware inside the chain served gzip to the first attempt; the retry, through another
// proxy or client, does not ask for it) is decoded when it is gzip or deflate, and replayed
// without Content-Encoding and Content-Length. Any other encoding, or one that does not
// decode, is replayed as stored. A request without Accept-Encoding is taken as accepting no
// encoding, as compressing middlewares take it.
func forClient(h http.Header, body []byte, accept string) (http.Header, []byte) {
	enc := strings.TrimSpace(h.Get("Content-Encoding"))
	if enc == "" || acceptsEncoding(accept, enc) {
		return h, body
	}
	var zr io.Reader
	var err error
	switch strings.ToLower(enc) {
	case "gzip", "x-gzip":
		zr, err = gzip.NewReader(bytes.NewReader(body))
	case "deflate": // HTTP's deflate is the zlib format
		zr, err = zlib.NewReader(bytes.NewReader(body))
	default:
		return h, body
	}
	if err != nil {
		return h, body
	}
	plain, err := io.ReadAll(io.LimitReader(zr, maxDecodedReplay+1))
	if err != nil || len(plain) > maxDecodedReplay {
		return h, body
	}
	out := h.Clone()
	out.Del("Content-Encoding")
	out.Del("Content-Length")
	return out, plain
}

// acceptsEncoding reports whether an Accept-Encoding header value lists the content coding
// enc (or "*") with a weight above zero (RFC 9110, section 12.5.3). Coding names are
// compared case-insensitively; "x-gzip" is "gzip".
func acceptsEncoding(accept, enc string) bool {
	enc = normCoding(enc)
	star := false
	for part := range strings.SplitSeq(accept, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = normCoding(name)
		if name == "" {
			continue
		}
		ok := weight(params) > 0
		switch name {
		case enc:
			return ok
		case "*":
			star = ok
		}
	}
	return star
}

func normCoding(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "x-gzip" {
		return "gzip"
	}
	return s
}

// weight is the q parameter among params (1 when absent; 0 when malformed).
func weight(params string) float64 {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || q < 0 {
			return 0
		}
		return q
	}
	return 1
}
