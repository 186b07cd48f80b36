package s3

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxChunkLine bounds a chunk header or trailer line (hex size, ";chunk-signature=" and 64 hex
// digits, or a trailer such as x-amz-checksum-crc64nvme:<base64>).
const maxChunkLine = 4096

// chunkedReader decodes an aws-chunked body: chunks "<hex size>[;chunk-signature=<sig>]\r\n
// <data>\r\n", a last chunk of size 0, then optional trailer lines and an empty line. The
// decoded length must be `want` (x-amz-decoded-content-length). Chunk signatures are not
// checked: the request's own signature is (authenticate).
type chunkedReader struct {
	r    *bufio.Reader
	body io.Closer
	left int64 // bytes left in the current chunk
	got  int64
	want int64
	done bool
	err  error
}

func newChunkedReader(body io.ReadCloser, want int64) io.ReadCloser {
	return &chunkedReader{r: bufio.NewReaderSize(body, 64<<10), body: body, want: want}
}

var errBadChunk = newError(http.StatusBadRequest, "IncompleteBody", "The aws-chunked body is malformed.")

func (c *chunkedReader) line() (string, error) {
	var b strings.Builder
	for {
		frag, err := c.r.ReadSlice('\n')
		b.Write(frag)
		if b.Len() > maxChunkLine {
			return "", errBadChunk
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				err = errBadChunk
			}
			return "", err
		}
	}
	s := b.String()
	if !strings.HasSuffix(s, "\r\n") {
		return "", errBadChunk
	}
	return s[:len(s)-2], nil
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	for c.left == 0 {
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
		if c.done {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	c.got += int64(n)
	if c.got > c.want {
		c.err = errBadChunk
		return n, c.err
	}
	if c.left == 0 && err == nil {
		if crlf, e := c.line(); e != nil || crlf != "" {
			c.err = errBadChunk
			return n, c.err
		}
	}
	if errors.Is(err, io.EOF) {
		err = errBadChunk
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads a chunk header; the last one (size 0) ends the body after its trailers.
func (c *chunkedReader) next() error {
	h, err := c.line()
	if err != nil {
		return err
	}
	size, _, _ := strings.Cut(h, ";")
	n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
	if err != nil || n < 0 {
		return errBadChunk
	}
	if n > 0 {
		c.left = n
		return nil
	}
	for { // trailers, up to the empty line (or the end of the body)
		t, err := c.line()
		if err != nil {
			if errors.Is(err, errBadChunk) {
				break // some clients end the body right after the last chunk
			}
			return err
		}
		if t == "" {
			break
		}
	}
	if c.got != c.want {
		return errBadChunk
	}
	c.done = true
	return nil
}

func (c *chunkedReader) Close() error { return c.body.Close() }
