package s3

import (
	"strings"
	"testing"
)

func TestObjectSizeLimit(t *testing.T) {
	b := start(t, Options{MaxObjectSize: 1024, MaxTotalSize: 1 << 20})
	b.must(200, "PUT", "/bkt/ok", strings.Repeat("x", 1024))
	b.wantError(b.do("PUT", "/bkt/big", strings.Repeat("x", 1025)), 413, "EntityTooLarge")
	b.wantError(b.do("PUT", "/bkt/big", strings.NewReader(strings.Repeat("x", 1025))), 413, "EntityTooLarge")
	b.wantError(b.do("PUT", "/bkt/big", "", "Content-Encoding", "aws-chunked",
		"x-amz-decoded-content-length", "5000"), 413, "EntityTooLarge")
	id := initiate(t, b, "/bkt/mp")
	b.wantError(b.do("PUT", "/bkt/mp?partNumber=1&uploadId="+id, strings.Repeat("x", 1025)), 413, "EntityTooLarge")
	b.must(200, "PUT", "/bkt/mp?partNumber=1&uploadId="+id, strings.Repeat("x", 600))
	b.must(200, "PUT", "/bkt/mp?partNumber=2&uploadId="+id, strings.Repeat("x", 600))
	b.wantError(b.do("POST", "/bkt/mp?uploadId="+id, nil), 413, "EntityTooLarge")
}

func TestTotalSizeLimit(t *testing.T) {
	b := start(t, Options{MaxObjectSize: 1000, MaxTotalSize: 2500})
	b.must(200, "PUT", "/bkt/a", strings.Repeat("a", 1000))
	b.must(200, "PUT", "/bkt/b", strings.Repeat("b", 1000))
	b.wantError(b.do("PUT", "/bkt/c", strings.Repeat("c", 1000)), 507, "InsufficientStorage")
	b.wantError(b.do("PUT", "/bkt/c", nil, "x-amz-copy-source", "/bkt/a"), 507, "InsufficientStorage")
	b.must(200, "PUT", "/bkt/a", strings.Repeat("a", 1000)) // overwrite: same size fits
	id := initiate(t, b, "/bkt/mp")
	b.must(200, "PUT", "/bkt/mp?partNumber=1&uploadId="+id, strings.Repeat("p", 500))
	b.wantError(b.do("PUT", "/bkt/mp?partNumber=2&uploadId="+id, "p"), 507, "InsufficientStorage")
	b.must(204, "DELETE", "/bkt/mp?uploadId="+id, nil) // abort frees the parts
	b.must(204, "DELETE", "/bkt/b", nil)
	b.must(200, "PUT", "/bkt/c", strings.Repeat("c", 1000))
	b.must(200, "PUT", "/bkt/d", strings.Repeat("d", 500))
	if r := b.must(200, "GET", "/health", nil); !strings.Contains(r.body, `"bytes":2500`) {
		t.Errorf("health after filling = %q, want 2500 bytes used", r.body)
	}
}
