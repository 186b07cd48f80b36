package s3

import (
	"encoding/xml"
	"fmt"
	"strings"
	"testing"
)

func awsChunked(data string, sizes ...int) string {
	var b strings.Builder
	for _, n := range sizes {
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n%s\r\n", n, strings.Repeat("0", 64), data[:n])
		data = data[n:]
	}
	b.WriteString("0;chunk-signature=" + strings.Repeat("0", 64) + "\r\n")
	b.WriteString("x-amz-checksum-crc32:AAAAAA==\r\n\r\n")
	return b.String()
}

// aws-chunked bodies (with trailers) are decoded for parts too, which gofakes3 alone stores
// encoded; a body that does not add up is refused.
func TestAwsChunkedPartsAreDecoded(t *testing.T) {
	b := start(t, Options{})
	b.must(200, "PUT", "/chunky", nil)
	var init struct {
		UploadID string `xml:"UploadId"`
	}
	if err := xml.Unmarshal([]byte(b.must(200, "POST", "/chunky/obj?uploads", nil).body), &init); err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("0123456789abcdef", 1000) // 16000 bytes
	hdr := []string{"x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "Content-Encoding", "aws-chunked",
		"x-amz-decoded-content-length", "16000", "x-amz-trailer", "x-amz-checksum-crc32"}
	part := b.must(200, "PUT", "/chunky/obj?partNumber=1&uploadId="+init.UploadID, awsChunked(data, 8192, 7808), hdr...)
	etag := part.header.Get("ETag")
	done := fmt.Sprintf(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>%s</ETag></Part></CompleteMultipartUpload>`, etag)
	b.must(200, "POST", "/chunky/obj?uploadId="+init.UploadID, done)
	if got := b.must(200, "GET", "/chunky/obj", nil).body; got != data {
		t.Fatalf("decoded part: %d bytes, want %d", len(got), len(data))
	}
	// a declared length that the chunks do not match
	hdr[5] = "16001"
	b.wantError(b.do("PUT", "/chunky/bad", awsChunked(data, 16000), hdr...), 400, "IncompleteBody")
	if r := b.do("GET", "/chunky/bad", nil); r.code != 404 {
		t.Fatalf("a malformed body was stored: %d", r.code)
	}
}
