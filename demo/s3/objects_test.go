package s3

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

func TestHealth(t *testing.T) {
	b := start(t, Options{})
	r := b.must(200, "GET", "/health", nil)
	if !strings.Contains(r.body, `"status":"ok"`) {
		t.Fatalf("health body = %q", r.body)
	}
}

func TestPutGetHeadDeleteObject(t *testing.T) {
	b := start(t, Options{})
	put := b.must(200, "PUT", "/bkt/dir/a.txt", "hello", "Content-Type", "text/plain", "x-amz-meta-color", "red")
	if put.header.Get("ETag") != etagOf("hello") {
		t.Errorf("PUT ETag = %q, want %q", put.header.Get("ETag"), etagOf("hello"))
	}
	get := b.must(200, "GET", "/bkt/dir/a.txt", nil)
	if get.body != "hello" || get.header.Get("Content-Type") != "text/plain" ||
		get.header.Get("ETag") != etagOf("hello") || get.header.Get("x-amz-meta-color") != "red" {
		t.Errorf("GET = %q %v", get.body, get.header)
	}
	head := b.must(200, "HEAD", "/bkt/dir/a.txt", nil)
	if head.body != "" || head.header.Get("Content-Length") != "5" {
		t.Errorf("HEAD = %q, Content-Length %q", head.body, head.header.Get("Content-Length"))
	}
	rng := b.must(206, "GET", "/bkt/dir/a.txt", nil, "Range", "bytes=1-3")
	if rng.body != "ell" {
		t.Errorf("Range GET = %q, want ell", rng.body)
	}
	b.must(200, "PUT", "/bkt/dir/a.txt", "bye")
	if got := b.must(200, "GET", "/bkt/dir/a.txt", nil).body; got != "bye" {
		t.Errorf("overwritten object = %q", got)
	}
	b.must(204, "DELETE", "/bkt/dir/a.txt", nil)
	b.wantError(b.do("GET", "/bkt/dir/a.txt", nil), 404, "NoSuchKey")
	b.must(204, "DELETE", "/bkt/dir/a.txt", nil) // deleting a missing key is fine, as in S3
	if r := b.do("HEAD", "/bkt/dir/a.txt", nil); r.code != 404 || r.body != "" {
		t.Errorf("HEAD missing = %d %q, want 404 without body", r.code, r.body)
	}
	if r := b.must(200, "GET", "/bkt/", nil); !strings.Contains(r.body, "<ListBucketResult") {
		t.Errorf("GET /bkt/ is not a listing: %q", r.body)
	}
}

func TestErrorsAreS3XML(t *testing.T) {
	b := start(t, Options{})
	b.wantError(b.do("GET", "/nobucket/key", nil), 404, "NoSuchBucket")
	b.wantError(b.do("GET", "/nobucket", nil), 404, "NoSuchBucket")
	b.wantError(b.do("DELETE", "/nobucket/key", nil), 404, "NoSuchBucket")
	b.wantError(b.do("GET", "/bad%20bucket/key", nil), 400, "InvalidBucketName")
	b.wantError(b.do("POST", "/bkt/key", nil), 405, "MethodNotAllowed")
	b.wantError(b.do("PATCH", "/bkt", nil), 405, "MethodNotAllowed")
	b.wantError(b.do("PUT", "/bkt/"+strings.Repeat("k", 1025), "x"), 400, "KeyTooLongError")
	r := b.do("GET", "/nobucket/key", nil)
	if r.header.Get("x-amz-request-id") == "" || !strings.Contains(r.body, "<RequestId>") {
		t.Errorf("error without request id: %q", r.body)
	}
}

func TestChunkedUpload(t *testing.T) {
	b := start(t, Options{})
	data := strings.Repeat("0123456789", 10000)
	// HalfReader makes the client send many small chunks of Transfer-Encoding: chunked.
	b.must(200, "PUT", "/bkt/chunked", iotest.HalfReader(strings.NewReader(data)))
	if got := b.must(200, "GET", "/bkt/chunked", nil).body; got != data {
		t.Fatalf("chunked upload stored %d bytes, want %d", len(got), len(data))
	}
}

func TestAWSChunkedUpload(t *testing.T) {
	b := start(t, Options{})
	signed := "5;chunk-signature=aaaa\r\nhello\r\n6;chunk-signature=bbbb\r\n world\r\n0;chunk-signature=cccc\r\n\r\n"
	b.must(200, "PUT", "/bkt/signed", signed, "x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
		"x-amz-decoded-content-length", "11")
	if got := b.must(200, "GET", "/bkt/signed", nil).body; got != "hello world" {
		t.Fatalf("aws-chunked signed upload stored %q", got)
	}
	trailer := "3\r\nabc\r\n0\r\nx-amz-checksum-crc32:NSRBwg==\r\n\r\n"
	b.must(200, "PUT", "/bkt/trailer", strings.NewReader(trailer), "Content-Encoding", "aws-chunked",
		"x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
	if got := b.must(200, "GET", "/bkt/trailer", nil).body; got != "abc" {
		t.Fatalf("aws-chunked trailer upload stored %q", got)
	}
	b.wantError(b.do("PUT", "/bkt/bad", "zz\r\nabc\r\n", "Content-Encoding", "aws-chunked"), 400, "IncompleteBody")
	b.wantError(b.do("PUT", "/bkt/short", "5\r\nab", "Content-Encoding", "aws-chunked"), 400, "IncompleteBody")
}

func TestCopyObject(t *testing.T) {
	b := start(t, Options{})
	b.must(200, "PUT", "/src/a%20b", "payload", "Content-Type", "text/x")
	res := decode[copyResult](t, b.must(200, "PUT", "/dst/copy", nil, "x-amz-copy-source", "/src/a%20b"))
	if res.ETag != etagOf("payload") || res.LastModified == "" {
		t.Errorf("CopyObjectResult = %+v", res)
	}
	got := b.must(200, "GET", "/dst/copy", nil)
	if got.body != "payload" || got.header.Get("Content-Type") != "text/x" {
		t.Errorf("copied object = %q %q", got.body, got.header.Get("Content-Type"))
	}
	b.must(200, "PUT", "/dst/copy2", nil, "x-amz-copy-source", "src/a%20b?versionId=null")
	b.wantError(b.do("PUT", "/dst/x", nil, "x-amz-copy-source", "/src/missing"), 404, "NoSuchKey")
	b.wantError(b.do("PUT", "/dst/x", nil, "x-amz-copy-source", "/nosuch/a"), 404, "NoSuchBucket")
	b.wantError(b.do("PUT", "/dst/x", nil, "x-amz-copy-source", "nokey"), 400, "InvalidArgument")
}

func TestBuckets(t *testing.T) {
	b := start(t, Options{})
	b.must(200, "PUT", "/empty", nil)
	b.must(200, "HEAD", "/empty", nil)
	b.must(200, "PUT", "/full/k", "v")
	if r := b.must(200, "GET", "/", nil); !strings.Contains(r.body, "<Name>empty</Name>") ||
		!strings.Contains(r.body, "<Name>full</Name>") {
		t.Errorf("ListBuckets = %q", r.body)
	}
	b.wantError(b.do("DELETE", "/full", nil), 409, "BucketNotEmpty")
	b.must(204, "DELETE", "/empty", nil)
	if r := b.do("HEAD", "/empty", nil); r.code != 404 {
		t.Errorf("HEAD deleted bucket = %d", r.code)
	}
}

func TestBlob(t *testing.T) {
	b := start(t, Options{})
	for _, n := range []int{0, 1, 26, 65520, 65521, 200000} {
		r := b.must(200, "GET", "/_demo/blob?size="+strconv.Itoa(n), nil)
		if len(r.body) != n {
			t.Fatalf("blob size=%d returned %d bytes", n, len(r.body))
		}
		for i := 0; i < n; i++ {
			if r.body[i] != blobByte(int64(i)) {
				t.Fatalf("blob size=%d: byte %d = %q, want %q", n, i, r.body[i], blobByte(int64(i)))
			}
		}
	}
	if r := b.must(200, "HEAD", "/_demo/blob?size=1000", nil); r.header.Get("Content-Length") != "1000" {
		t.Errorf("HEAD blob Content-Length = %q", r.header.Get("Content-Length"))
	}
	b.wantError(b.do("GET", "/_demo/blob?size=67108865", nil), 400, "InvalidArgument")
	b.wantError(b.do("GET", "/_demo/blob?size=-1", nil), 400, "InvalidArgument")
	b.wantError(b.do("GET", "/_demo/blob", nil), 400, "InvalidArgument")
	if r := b.must(200, "GET", "/_demo/blob?size=67108864", nil); len(r.body) != 64<<20 {
		t.Errorf("64 MiB blob returned %d bytes", len(r.body))
	}
}

func TestConcurrentClients(t *testing.T) {
	b := start(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				key := "/bkt/g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				body := strings.Repeat(strconv.Itoa(g), i+1)
				req, _ := http.NewRequest("PUT", b.url+key, strings.NewReader(body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != 200 {
					errs <- "PUT " + key
					return
				}
				resp.Body.Close()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if r := b.must(200, "GET", "/health", nil); !strings.Contains(r.body, `"objects":200`) {
		t.Errorf("after 200 concurrent PUTs health = %q", r.body)
	}
}
