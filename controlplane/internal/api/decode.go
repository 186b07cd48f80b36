package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// DefaultMaxBody is the largest request body accepted (bytes).
const DefaultMaxBody = 64 << 10

const maxDepth = 32

// decodeJSON reads the body into dst strictly: Content-Type application/json, at most MaxBody
// bytes, one JSON object, no unknown field, no duplicate key, no trailing data, every value of
// the field's type (so an overflowing number is refused, never wrapped).
func (s *server) decodeJSON(c *gin.Context, dst any) error {
	if ct := c.ContentType(); ct != "application/json" {
		return apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, s.opts.MaxBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apiErr(http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("the body must be at most %d bytes", s.opts.MaxBody))
	}
	if err != nil {
		return errBadRequest("invalid_body", "the body could not be read")
	}
	return strictUnmarshal(body, dst)
}

// strictUnmarshal is the body rules of decodeJSON without the HTTP parts (fuzzed on its own).
func strictUnmarshal(body []byte, dst any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return errBadRequest("empty_body", "a JSON object is required")
	}
	if trimmed[0] != '{' {
		return errBadRequest("invalid_json", "the body must be a JSON object")
	}
	if err := checkStructure(trimmed); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errBadRequest("trailing_data", "the body must hold exactly one JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return errBadRequest("invalid_json", "malformed JSON at byte "+strconv.FormatInt(se.Offset, 10))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(body)"
		}
		return &Error{Status: http.StatusBadRequest, Code: "invalid_type",
			Message: fmt.Sprintf("%s must be %s (got %s, or out of range)", field, typeName(te.Type.String()), te.Value),
			Details: map[string]string{"field": field}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &Error{Status: http.StatusBadRequest, Code: "unknown_field",
			Message: "unknown field " + strconv.Quote(f), Details: map[string]string{"field": f}}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errBadRequest("invalid_json", "the JSON ends early")
	}
	return errBadRequest("invalid_json", "malformed JSON")
}

func typeName(t string) string {
	switch strings.TrimPrefix(t, "*") {
	case "int", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	return "of another type"
}

// checkStructure walks the tokens once: well-formed, nested at most maxDepth, no object with
// the same key twice (which parsers resolve differently, so it is refused rather than guessed).
func checkStructure(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		keys  map[string]bool
		isObj bool
		inKey bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return decodeError(err)
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if len(stack) >= maxDepth {
					return errBadRequest("invalid_json", "JSON nested too deeply")
				}
				stack = append(stack, frame{keys: map[string]bool{}, isObj: d == '{', inKey: d == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 && d != '{' && d != '[' && stack[len(stack)-1].isObj {
				stack[len(stack)-1].inKey = true
			}
			continue
		}
		if len(stack) == 0 {
			continue
		}
		top := &stack[len(stack)-1]
		if !top.isObj {
			continue
		}
		if top.inKey {
			k, _ := tok.(string)
			if top.keys[k] {
				return &Error{Status: http.StatusBadRequest, Code: "duplicate_field",
					Message: "field " + strconv.Quote(k) + " appears twice", Details: map[string]string{"field": k}}
			}
			top.keys[k] = true
			top.inKey = false
		} else {
			top.inKey = true
		}
	}
}
