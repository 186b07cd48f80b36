package s3

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type backend struct {
	t     *testing.T
	url   string // the storage API
	admin string // the failure switch
	srv   *Server
}

func start(t *testing.T, o Options) *backend {
	t.Helper()
	s := New(o)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	adm := httptest.NewServer(s.Admin())
	t.Cleanup(adm.Close)
	return &backend{t: t, url: srv.URL, admin: adm.URL, srv: s}
}

// adminDo sends a request to the failure switch's own listener.
func (b *backend) adminDo(method, path string) reply {
	b.t.Helper()
	return (&backend{t: b.t, url: b.admin}).do(method, path, nil)
}

type reply struct {
	code   int
	header http.Header
	body   string
}

// do sends a request; body may be nil, a string, or an io.Reader (sent chunked: no length).
func (b *backend) do(method, path string, body any, headers ...string) reply {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case string:
		rd = strings.NewReader(v)
	case io.Reader:
		rd = v
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, ok := body.(io.Reader); ok {
		req.ContentLength = -1 // unknown length: Transfer-Encoding: chunked
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: string(data)}
}

// must checks the status code and returns the reply.
func (b *backend) must(code int, method, path string, body any, headers ...string) reply {
	b.t.Helper()
	r := b.do(method, path, body, headers...)
	if r.code != code {
		b.t.Fatalf("%s %s = %d %q, want %d", method, path, r.code, r.body, code)
	}
	return r
}

// s3Error decodes an XML error body and checks its code and status.
func (b *backend) wantError(r reply, code int, s3code string) {
	b.t.Helper()
	var e errorBody
	if r.code != code {
		b.t.Fatalf("status = %d (%q), want %d %s", r.code, r.body, code, s3code)
	}
	if err := xml.Unmarshal([]byte(r.body), &e); err != nil || e.Code != s3code {
		b.t.Fatalf("error body %q: code %q (%v), want %s", r.body, e.Code, err, s3code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/xml" {
		b.t.Errorf("error Content-Type = %q, want application/xml", ct)
	}
}
