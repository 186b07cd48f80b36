package webui

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

var (
	indexHTML = []byte(`<!doctype html><html><head><script type="module" src="/assets/index-AbC123.js"></script></head><body><div id="app"></div></body></html>`)
	bigJS     = []byte("export const x = '" + strings.Repeat("tollgate ", 2000) + "';\n")
)

func build() fstest.MapFS {
	return fstest.MapFS{
		"index.html":              {Data: indexHTML},
		"favicon.svg":             {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
		"assets/index-AbC123.js":  {Data: bigJS},
		"assets/index-DeF456.css": {Data: []byte("body{margin:0}")},
		".gitkeep":                {Data: nil},
		".vite/manifest.json":     {Data: []byte(`{"secret":"layout"}`)},
	}
}

func console(t *testing.T, fsys fstest.MapFS) *Console {
	t.Helper()
	c, err := New(fsys)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func do(h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestServesFilesWithTheirCaching(t *testing.T) {
	c := console(t, build())
	cases := []struct {
		path, ctype, cache string
		body               []byte
	}{
		{"/", "text/html; charset=utf-8", CacheRevalidate, indexHTML},
		{"/index.html", "text/html; charset=utf-8", CacheRevalidate, indexHTML},
		{"/assets/index-AbC123.js", "text/javascript; charset=utf-8", CacheImmutable, bigJS},
		{"/assets/index-DeF456.css", "text/css; charset=utf-8", CacheImmutable, []byte("body{margin:0}")},
		{"/favicon.svg", "image/svg+xml", CacheRevalidate, []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
	}
	for _, tc := range cases {
		rec := do(c, http.MethodGet, tc.path)
		if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), tc.body) {
			t.Errorf("GET %s = %d, body %q", tc.path, rec.Code, rec.Body.String())
		}
		if got := rec.Header().Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if got := rec.Header().Get("Cache-Control"); got != tc.cache {
			t.Errorf("GET %s: Cache-Control %q, want %q", tc.path, got, tc.cache)
		}
		if rec.Header().Get("ETag") == "" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", tc.path, rec.Header())
		}
	}
}

func TestSPAFallback(t *testing.T) {
	c := console(t, build())
	for _, p := range []string{"/apps", "/apps/demo-p1/edit", "/settings?tab=audit", "/login", "/a/../emergency"} {
		rec := do(c, http.MethodGet, p)
		if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), indexHTML) {
			t.Errorf("GET %s = %d %q, want index.html", p, rec.Code, rec.Body.String())
		}
		if rec.Header().Get("Cache-Control") != CacheRevalidate {
			t.Errorf("GET %s: the fallback must not be cached: %q", p, rec.Header().Get("Cache-Control"))
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: CSP %q", p, csp)
		}
	}
}

func TestNotFound(t *testing.T) {
	c := console(t, build())
	// a file that is not there is a 404, never index.html: a stale hashed asset must fail
	// loudly rather than be cached for a year as HTML
	for _, p := range []string{"/assets/index-Old999.js", "/assets/", "/favicon.ico", "/robots.txt",
		"/.vite/manifest.json", "/.gitkeep", "/.env", "/assets/../.vite/manifest.json", "/x/.git/config"} {
		rec := do(c, http.MethodGet, p)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d %q, want 404", p, rec.Code, rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), "secret") || bytes.Contains(rec.Body.Bytes(), indexHTML) {
			t.Errorf("GET %s leaked %q", p, rec.Body.String())
		}
	}
}

func TestConditionalAndHead(t *testing.T) {
	c := console(t, build())
	first := do(c, http.MethodGet, "/assets/index-AbC123.js")
	etag := first.Header().Get("ETag")
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		rec := do(c, http.MethodGet, "/assets/index-AbC123.js", "If-None-Match", inm)
		if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
			t.Errorf("If-None-Match %s = %d (%d bytes), want 304", inm, rec.Code, rec.Body.Len())
		}
	}
	if rec := do(c, http.MethodGet, "/assets/index-AbC123.js", "If-None-Match", `"stale"`); rec.Code != 200 {
		t.Errorf("stale ETag = %d, want 200", rec.Code)
	}
	head := do(c, http.MethodHead, "/")
	if head.Code != 200 || head.Body.Len() != 0 || head.Header().Get("Content-Length") != strconv.Itoa(len(indexHTML)) {
		t.Errorf("HEAD / = %d, %d bytes, Content-Length %q", head.Code, head.Body.Len(), head.Header().Get("Content-Length"))
	}
}

func TestGzip(t *testing.T) {
	c := console(t, build())
	rec := do(c, http.MethodGet, "/assets/index-AbC123.js", "Accept-Encoding", "br, gzip;q=0.8")
	if rec.Header().Get("Content-Encoding") != "gzip" || rec.Header().Get("Vary") != "Accept-Encoding" {
		t.Fatalf("headers %v", rec.Header())
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, bigJS) || rec.Body.Len() >= len(bigJS) {
		t.Fatalf("gzip body does not match (%d bytes)", len(plain))
	}
	for _, ae := range []string{"", "identity", "gzip;q=0", "deflate"} {
		rec := do(c, http.MethodGet, "/assets/index-AbC123.js", "Accept-Encoding", ae)
		if rec.Header().Get("Content-Encoding") != "" || !bytes.Equal(rec.Body.Bytes(), bigJS) {
			t.Errorf("Accept-Encoding %q: got Content-Encoding %q", ae, rec.Header().Get("Content-Encoding"))
		}
	}
	// small files are not compressed at all
	if rec := do(c, http.MethodGet, "/", "Accept-Encoding", "gzip"); rec.Header().Get("Content-Encoding") != "" {
		t.Errorf("index.html of %d bytes was compressed", len(indexHTML))
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	c := console(t, build())
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		rec := do(c, m, "/")
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s / = %d, Allow %q", m, rec.Code, rec.Header().Get("Allow"))
		}
	}
}

func TestNotBuilt(t *testing.T) {
	c := console(t, fstest.MapFS{".gitkeep": {Data: nil}})
	if c.Built() {
		t.Fatal("Built() with no index.html")
	}
	for _, p := range []string{"/", "/apps"} {
		rec := do(c, http.MethodGet, p)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "not built") {
			t.Errorf("GET %s = %d %q", p, rec.Code, rec.Body.String())
		}
	}
	if !console(t, build()).Built() {
		t.Fatal("Built() false with an index.html")
	}
}

func TestMount(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "api") })
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "console") })
	h := Mount(api, ui)
	cases := []struct{ method, path, want string }{
		{"GET", "/", "console"},
		{"GET", "/apps/demo-p1", "console"},
		{"GET", "/assets/index-AbC123.js", "console"},
		{"GET", "/apiary", "console"},
		{"HEAD", "/settings", "console"},
		{"GET", "/api", "api"},
		{"GET", "/api/v1/apps", "api"},
		{"GET", "/api/v1/nope", "api"},
		{"GET", "//api/v1/apps", "api"},
		{"GET", "/x/../api/v1/apps", "api"},
		{"GET", "/health", "api"},
		{"GET", "/metrics", "api"},
		{"GET", "/debug/pprof/", "api"},
		{"POST", "/", "api"},
		{"POST", "/apps", "api"},
		{"OPTIONS", "/api/v1/apps", "api"},
	}
	for _, tc := range cases {
		req := httptest.NewRequest(tc.method, "http://cp"+tc.path, nil)
		req.URL.Path = tc.path // keep the path as sent, unnormalised
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Body.String(); got != tc.want {
			t.Errorf("%s %s went to %s, want %s", tc.method, tc.path, got, tc.want)
		}
	}
}

// The embedded build: index.html is served, and so is every asset it references, immutable.
// Before `make web` there is only the placeholder, which must be served instead.
func TestEmbeddedConsole(t *testing.T) {
	c := Handler()
	rec := do(c, http.MethodGet, "/")
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if !c.Built() {
		t.Logf("web/dist holds no build (run make web): the placeholder page is served")
		if !strings.Contains(rec.Body.String(), "not built") {
			t.Fatalf("placeholder page missing: %q", rec.Body.String())
		}
		return
	}
	refs := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`).FindAllStringSubmatch(rec.Body.String(), -1)
	if len(refs) == 0 {
		t.Fatalf("index.html references no assets: %q", rec.Body.String())
	}
	for _, m := range refs {
		a := do(c, http.MethodGet, m[1])
		if a.Code != 200 || a.Header().Get("Cache-Control") != CacheImmutable || a.Body.Len() == 0 {
			t.Errorf("GET %s = %d, Cache-Control %q, %d bytes", m[1], a.Code, a.Header().Get("Cache-Control"), a.Body.Len())
		}
	}
	if a := do(c, http.MethodGet, "/.vite/manifest.json"); a.Code != http.StatusNotFound {
		t.Errorf("the build manifest is served: %d", a.Code)
	}
}
