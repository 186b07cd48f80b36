package s3

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
)

// apiError is an S3 error: a code, a message and an HTTP status.
type apiError struct {
	Code    string
	Message string
	Status  int
}

func (e *apiError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...), Status: status}
}

func errInvalidArgument(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "InvalidArgument", format, args...)
}

func errMethodNotAllowed(method string) *apiError {
	return newError(http.StatusMethodNotAllowed, "MethodNotAllowed",
		"The specified method %s is not allowed against this resource.", method)
}

// errorBody is the S3 XML error document.
type errorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource"`
	RequestID string   `xml:"RequestId"`
}

// writeError answers err as an S3 XML error; an error that is not an *apiError is an
// InternalError. HEAD answers carry no body.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = newError(http.StatusInternalServerError, "InternalError", "%v", err)
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(ae.Status)
		return
	}
	writeXML(w, ae.Status, errorBody{Code: ae.Code, Message: ae.Message, Resource: r.URL.Path,
		RequestID: w.Header().Get("x-amz-request-id")})
}

// writeXML writes an XML document with its declaration.
func writeXML(w http.ResponseWriter, status int, v any) {
	out, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, "xml encoding failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}
