package s3

import (
	"strings"
	"testing"
)

func initiate(t *testing.T, b *backend, path string) string {
	t.Helper()
	res := decode[initiateResult](t, b.must(200, "POST", path+"?uploads", nil, "Content-Type", "video/mp4"))
	if res.UploadID == "" || res.Key != strings.SplitN(path, "/", 3)[2] {
		t.Fatalf("InitiateMultipartUploadResult = %+v", res)
	}
	return res.UploadID
}

func TestMultipartCompleteAllParts(t *testing.T) {
	b := start(t, Options{})
	id := initiate(t, b, "/bkt/big/file")
	p2 := b.must(200, "PUT", "/bkt/big/file?partNumber=2&uploadId="+id, "world")
	b.must(200, "PUT", "/bkt/big/file?partNumber=1&uploadId="+id, strings.NewReader("hello "))
	if p2.header.Get("ETag") != etagOf("world") {
		t.Errorf("part ETag = %q", p2.header.Get("ETag"))
	}
	ups := decode[listUploadsResult](t, b.must(200, "GET", "/bkt?uploads", nil))
	if len(ups.Uploads) != 1 || ups.Uploads[0].UploadID != id || ups.Uploads[0].Key != "big/file" {
		t.Fatalf("ListMultipartUploads = %+v", ups)
	}
	res := decode[completeResult](t, b.must(200, "POST", "/bkt/big/file?uploadId="+id, nil))
	if !strings.HasSuffix(res.ETag, `-2"`) || res.Key != "big/file" {
		t.Errorf("CompleteMultipartUploadResult = %+v", res)
	}
	got := b.must(200, "GET", "/bkt/big/file", nil)
	if got.body != "hello world" || got.header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("completed object = %q %q", got.body, got.header.Get("Content-Type"))
	}
	b.wantError(b.do("POST", "/bkt/big/file?uploadId="+id, nil), 404, "NoSuchUpload")
	if ups := decode[listUploadsResult](t, b.must(200, "GET", "/bkt?uploads", nil)); len(ups.Uploads) != 0 {
		t.Errorf("completed upload still listed: %+v", ups)
	}
}

func completeBody(parts ...string) string {
	var sb strings.Builder
	sb.WriteString("<CompleteMultipartUpload>")
	for i := 0; i+1 < len(parts); i += 2 {
		sb.WriteString("<Part><PartNumber>" + parts[i] + "</PartNumber><ETag>" + parts[i+1] + "</ETag></Part>")
	}
	sb.WriteString("</CompleteMultipartUpload>")
	return sb.String()
}

func TestMultipartCompleteListedParts(t *testing.T) {
	b := start(t, Options{})
	id := initiate(t, b, "/bkt/k")
	for n, data := range map[string]string{"1": "A", "2": "B", "3": "C"} {
		b.must(200, "PUT", "/bkt/k?partNumber="+n+"&uploadId="+id, data)
	}
	path := "/bkt/k?uploadId=" + id
	b.wantError(b.do("POST", path, completeBody("3", etagOf("C"), "1", etagOf("A"))), 400, "InvalidPartOrder")
	b.wantError(b.do("POST", path, completeBody("1", etagOf("wrong"))), 400, "InvalidPart")
	b.wantError(b.do("POST", path, completeBody("7", "")), 400, "InvalidPart")
	b.wantError(b.do("POST", path, "<not xml"), 400, "MalformedXML")
	b.must(200, "POST", path, completeBody("1", etagOf("A"), "3", etagOf("C")))
	if got := b.must(200, "GET", "/bkt/k", nil).body; got != "AC" {
		t.Fatalf("object from parts 1 and 3 = %q, want AC", got)
	}
}

func TestMultipartAbortAndErrors(t *testing.T) {
	b := start(t, Options{})
	id := initiate(t, b, "/bkt/k")
	b.must(200, "PUT", "/bkt/k?partNumber=1&uploadId="+id, "x")
	b.wantError(b.do("PUT", "/bkt/other?partNumber=1&uploadId="+id, "x"), 404, "NoSuchUpload")
	b.wantError(b.do("PUT", "/bkt/k?partNumber=0&uploadId="+id, "x"), 400, "InvalidArgument")
	b.wantError(b.do("PUT", "/bkt/k?partNumber=10001&uploadId="+id, "x"), 400, "InvalidArgument")
	b.wantError(b.do("PUT", "/bkt/k?partNumber=1", "x"), 400, "InvalidArgument")
	b.must(204, "DELETE", "/bkt/k?uploadId="+id, nil)
	b.wantError(b.do("PUT", "/bkt/k?partNumber=2&uploadId="+id, "x"), 404, "NoSuchUpload")
	b.wantError(b.do("DELETE", "/bkt/k?uploadId="+id, nil), 404, "NoSuchUpload")
	b.wantError(b.do("GET", "/bkt/k", nil), 404, "NoSuchKey")
	empty := initiate(t, b, "/bkt/e")
	b.wantError(b.do("POST", "/bkt/e?uploadId="+empty, nil), 400, "InvalidRequest")
}
