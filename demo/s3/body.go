package s3

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// readBody reads a request body of at most limit bytes. HTTP chunked transfer encoding is
// undone by net/http; the aws-chunked content encoding of SigV4 streaming uploads is undone here.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	body, size := io.Reader(r.Body), r.ContentLength
	if isAWSChunked(r) {
		body = newAWSChunkedReader(r.Body)
		size = -1
		if v := r.Header.Get("x-amz-decoded-content-length"); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				size = n
			}
		}
	}
	if size > limit {
		return nil, errTooLarge(limit)
	}
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(size))
	}
	n, err := buf.ReadFrom(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, newError(http.StatusBadRequest, "IncompleteBody", "Reading the request body failed: %v", err)
	}
	if n > limit {
		return nil, errTooLarge(limit)
	}
	if size >= 0 && n != size {
		return nil, newError(http.StatusBadRequest, "IncompleteBody",
			"The body had %d bytes, the request announced %d.", n, size)
	}
	return buf.Bytes(), nil
}

func isAWSChunked(r *http.Request) bool {
	if strings.HasPrefix(r.Header.Get("x-amz-content-sha256"), "STREAMING-") {
		return true
	}
	for _, enc := range strings.Split(r.Header.Get("Content-Encoding"), ",") {
		if strings.TrimSpace(enc) == "aws-chunked" {
			return true
		}
	}
	return false
}

// awsChunkedReader decodes "<hex size>[;ext]\r\n<data>\r\n ... 0[;ext]\r\n[trailers]\r\n".
// Chunk signatures and trailing checksums are not verified (a demo backend).
type awsChunkedReader struct {
	r        *bufio.Reader
	left     int64 // bytes left in the current chunk
	needCRLF bool  // the CRLF after a chunk's data is still unread
	err      error
}

func newAWSChunkedReader(r io.Reader) *awsChunkedReader {
	return &awsChunkedReader{r: bufio.NewReaderSize(r, 64<<10)}
}

func (c *awsChunkedReader) Read(p []byte) (int, error) {
	for c.err == nil && c.left == 0 {
		c.err = c.nextChunk()
	}
	if c.err != nil {
		return 0, c.err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// nextChunk reads a chunk header; at the last chunk it consumes the trailers and returns io.EOF.
func (c *awsChunkedReader) nextChunk() error {
	if c.needCRLF {
		if line, err := c.line(); err != nil || line != "" {
			return errors.New("aws-chunked: missing CRLF after chunk data")
		}
		c.needCRLF = false
	}
	line, err := c.line()
	if err != nil {
		return err
	}
	sizeHex, _, _ := strings.Cut(line, ";")
	size, err := strconv.ParseInt(strings.TrimSpace(sizeHex), 16, 64)
	if err != nil || size < 0 {
		return fmt.Errorf("aws-chunked: bad chunk size %q", sizeHex)
	}
	if size == 0 {
		return c.skipTrailers()
	}
	c.left, c.needCRLF = size, true
	return nil
}

func (c *awsChunkedReader) skipTrailers() error {
	for {
		line, err := c.line()
		if errors.Is(err, io.ErrUnexpectedEOF) || (err == nil && line == "") {
			return io.EOF
		}
		if err != nil {
			return err
		}
	}
}

// line reads one CRLF- (or LF-) terminated line without its terminator.
func (c *awsChunkedReader) line() (string, error) {
	b, err := c.r.ReadSlice('\n') // a line longer than the buffer is an error, not a memory sink
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", io.ErrUnexpectedEOF
		}
		return "", fmt.Errorf("aws-chunked: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
