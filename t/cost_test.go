package t

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// baseCost is docs/design.md §2's table, written here independently of the Lua classifier.
func baseCost(method, path, query string, copySource bool) int {
	has := func(name string) bool {
		for _, kv := range strings.Split(query, "&") {
			if kv == name || strings.HasPrefix(kv, name+"=") {
				return true
			}
		}
		return false
	}
	bucketOnly := strings.Count(strings.TrimSuffix(path, "/"), "/") <= 1
	switch method {
	case "GET":
		if bucketOnly || has("list-type") || has("uploads") || has("uploadId") {
			return 3
		}
		return 1
	case "HEAD":
		return 1
	case "PUT":
		switch {
		case copySource:
			return 6
		case has("uploadId") && has("partNumber"):
			return 4
		}
		return 5
	case "POST":
		switch {
		case has("uploads"):
			return 2
		case has("uploadId"):
			return 8
		}
		return 5
	case "DELETE":
		if has("uploadId") {
			return 3
		}
		return 2
	}
	panic(method)
}

// Property 1 through the gateway: for generated S3 request shapes and body sizes, the access-time
// cost is C_base(op) + ceil(request body bytes / 65536) x C_bw.
func TestProperty1CostOfGeneratedRequests(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	rapid.Check(t, func(rt *rapid.T) {
		method := rapid.SampledFrom([]string{"GET", "HEAD", "PUT", "POST", "DELETE"}).Draw(rt, "method")
		path := rapid.SampledFrom([]string{"/b", "/b/", "/b/k", "/b/dir/k.bin", "/bucket-2/a/b/c"}).Draw(rt, "path")
		query := rapid.SampledFrom([]string{"", "uploads", "uploadId=u1", "partNumber=3&uploadId=u1",
			"list-type=2&prefix=a", "versionId=7", "x-id=uploads"}).Draw(rt, "query")
		copySource := method == "PUT" && rapid.Bool().Draw(rt, "copy")
		size := 0
		if method == "PUT" || method == "POST" {
			size = rapid.SampledFrom([]int{0, 1, 65535, 65536, 65537, 200000, 1 << 20}).Draw(rt, "size")
		}
		url := path
		if query != "" {
			url += "?" + query
		}
		hdr := map[string]string{}
		if copySource {
			hdr["x-amz-copy-source"] = "/b/src"
		}
		var body *strings.Reader
		if size > 0 {
			body = strings.NewReader(strings.Repeat("u", size))
		}
		r := g.Do(method, url, "demo-p0", readerOrNil(body), hdr)
		if r.Status != 200 {
			rt.Fatalf("%s %s: status %d %s", method, url, r.Status, r.Body)
		}
		want := baseCost(method, path, query, copySource)
		want += (size + 65535) / 65536
		if r.Cost() != want {
			rt.Fatalf("%s %s (%d bytes, copy %v): cost %s, want %d", method, url, size, copySource,
				r.Header.Get("X-RateLimit-Cost"), want)
		}
	})
}

// C_bw is per app: an app with C_bw 3 pays three tokens per 64 KiB.
func TestPerAppBandwidthCoefficient(t *testing.T) {
	a := app("heavy", 1000, 100000)
	a.CBw = 3
	s := newStack(t, stackOptions{apps: appsOf(a)})
	r := s.gw().Do("PUT", "/b/k", "heavy", strings.NewReader(strings.Repeat("h", 131073)), nil)
	if r.Status != 200 || r.Cost() != 5+3*3 {
		t.Fatalf("status %d cost %d, want 200 and 5 + 3 units x 3", r.Status, r.Cost())
	}
}
