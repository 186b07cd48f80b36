// Package webui serves the admin console (the Vue app of web/) from the control plane: its files
// with caching that fits them — content-hashed assets/ cached for a year and immutable,
// index.html and everything else revalidated on each load (no-cache with an ETag) — and
// index.html for any other path so that the app's own router handles deep links (SPA fallback).
package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"tollgate/web"
)

// Cache-Control values.
const (
	CacheImmutable  = "public, max-age=31536000, immutable" // assets/: the name changes with the content
	CacheRevalidate = "no-cache"                            // index.html and other unhashed files
)

// ContentSecurityPolicy of the console's HTML. Element Plus sets style attributes, hence
// 'unsafe-inline' for styles only; scripts come from the console's own files.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; " +
	"frame-ancestors 'none'; base-uri 'self'; form-action 'self'"

const minGzip = 1024 // smaller files are sent as they are

// notBuilt is served as index.html when web/dist holds no build (a `go build` without `make web`).
const notBuilt = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>tollgate</title></head>
<body><h1>tollgate</h1><p>The admin console is not built into this binary. Run <code>make build</code>
(which runs <code>make web</code> first), or use the REST API under <code>/api/v1</code>.</p></body></html>
`

type file struct {
	body  []byte
	gzip  []byte // nil: not worth compressing
	ctype string
	etag  string
	cache string
}

// Console serves a built console.
type Console struct {
	files map[string]*file // by path without the leading slash
	index *file
}

// Handler is the console embedded in the binary (web/dist).
func Handler() *Console {
	c, err := New(web.Dist())
	if err != nil { // the embedded tree is fixed at build time: a failure is a build defect
		panic(fmt.Sprintf("webui: embedded console: %v", err))
	}
	return c
}

// New loads every file of fsys into memory (with gzip variants and ETags computed once).
// Files and directories whose name starts with a dot (.gitkeep, .vite/) are never served.
func New(fsys fs.FS) (*Console, error) {
	c := &Console{files: map[string]*file{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		cache := CacheRevalidate
		if strings.HasPrefix(p, "assets/") {
			cache = CacheImmutable
		}
		c.files[p] = newFile(p, body, cache)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("webui: load console: %w", err)
	}
	c.index = c.files["index.html"]
	if c.index == nil {
		c.index = newFile("index.html", []byte(notBuilt), CacheRevalidate)
	}
	return c, nil
}

// Built reports whether the console has an index.html of its own.
func (c *Console) Built() bool { return c.files["index.html"] != nil }

func newFile(name string, body []byte, cache string) *file {
	sum := sha256.Sum256(body)
	f := &file{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, cache: cache,
		ctype: mime.TypeByExtension(path.Ext(name))}
	if f.ctype == "" {
		f.ctype = http.DetectContentType(body)
	}
	if len(body) >= minGzip && compressible(f.ctype) {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // a valid level never fails
		_, _ = zw.Write(body)                                    // writes to a bytes.Buffer never fail
		_ = zw.Close()
		if buf.Len() < len(body)*9/10 {
			f.gzip = buf.Bytes()
		}
	}
	return f
}

func compressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || strings.Contains(ctype, "javascript") ||
		strings.Contains(ctype, "json") || strings.Contains(ctype, "svg")
}

// ServeHTTP answers GET and HEAD: a file of the build, else 404 for a path that names a file
// (an extension in its last segment, or under assets/), else index.html.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	f := c.files[p]
	if p == "" || p == "index.html" {
		f = c.index
	}
	if f == nil {
		if p == "assets" || strings.HasPrefix(p, "assets/") || hidden(p) || path.Ext(p) != "" {
			w.Header().Set("Cache-Control", CacheRevalidate)
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		f = c.index // a route of the app: its router takes it from here
	}
	serve(w, r, f, f == c.index)
}

// hidden: a segment starts with a dot (.vite/manifest.json, .gitkeep, .env …).
func hidden(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if strings.HasPrefix(s, ".") {
			return true
		}
	}
	return false
}

func serve(w http.ResponseWriter, r *http.Request, f *file, html bool) {
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", f.cache)
	h.Set("ETag", f.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if html {
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
	}
	body := f.body
	if f.gzip != nil {
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = f.gzip
		}
	}
	if match(r.Header.Get("If-None-Match"), f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// acceptsGzip: Accept-Encoding lists gzip (or *) with a q-value above zero.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(part, ";")
		enc = strings.ToLower(strings.TrimSpace(enc))
		if enc != "gzip" && enc != "*" {
			continue
		}
		q := 1.0
		if k, v, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.TrimSpace(k) == "q" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				q = f
			}
		}
		return q > 0
	}
	return false
}

// match: If-None-Match lists etag (weak comparison) or is "*".
func match(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// Paths that belong to the API, never to the console: these exactly, and everything under the
// prefixes.
var (
	reservedPaths    = []string{"/api", "/health", "/metrics"}
	reservedPrefixes = []string{"/api/", "/debug/"}
)

// Mount sends GET and HEAD requests for paths that are not the API's to the console and
// everything else to the API, so that the API's router (and its JSON 404) stays in charge of
// its own paths.
func Mount(api, console http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !reserved(r.URL.Path) {
			console.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func reserved(p string) bool {
	p = path.Clean("/" + p)
	for _, x := range reservedPaths {
		if p == x {
			return true
		}
	}
	for _, x := range reservedPrefixes {
		if strings.HasPrefix(p, x) {
			return true
		}
	}
	return false
}
