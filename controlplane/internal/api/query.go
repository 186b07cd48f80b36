package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"tollgate/internal/keys"
)

// queryInt reads an optional integer query parameter within [min, max].
func queryInt(c *gin.Context, name string, def, min, max int) (int, error) {
	v, present := c.GetQuery(name)
	if !present {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, errBadRequest("invalid_query", name+" must be an integer from "+strconv.Itoa(min)+" to "+strconv.Itoa(max))
	}
	return n, nil
}

// queryBool reads an optional boolean query parameter: true/false/1/0.
func queryBool(c *gin.Context, name string) (*bool, error) {
	v, present := c.GetQuery(name)
	if !present {
		return nil, nil
	}
	switch strings.ToLower(v) {
	case "true", "1":
		b := true
		return &b, nil
	case "false", "0":
		b := false
		return &b, nil
	}
	return nil, errBadRequest("invalid_query", name+" must be true or false")
}

// dryRun reads ?dry_run=.
// change is what every change route reads before it acts.
type change struct {
	id    string // the path parameter ("" for a route without one)
	actor string // the signed-in user
	dry   bool   // ?dry_run=true: validate and diff, write nothing
}

// readWrite reads the path parameter `param` (none when ""), the dry_run flag and, when body is
// not nil, the strict JSON body into it. On bad input it answers the error and returns false.
func (s *server) readWrite(c *gin.Context, param string, body any) (change, bool) {
	var w change
	var err error
	if param != "" {
		w.id, err = pathID(c, param)
	}
	if err == nil {
		w.dry, err = dryRun(c)
	}
	if err == nil && body != nil {
		err = s.decodeJSON(c, body)
	}
	if err != nil {
		s.fail(c, err)
		return w, false
	}
	p, _ := principalOf(c)
	w.actor = p.User
	return w, true
}

// readLiveWrite is readWrite of the "id" parameter for a change that has no dry run
// (?dry_run=true answers 400 invalid_query).
func (s *server) readLiveWrite(c *gin.Context, body any) (change, bool) {
	w, read := s.readWrite(c, "id", body)
	if read && w.dry {
		s.fail(c, errNoDryRun())
		return w, false
	}
	return w, read
}

// errMissing is the 400 missing_field of a required body field.
func errMissing(field string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "missing_field",
		Message: field + " is required", Details: map[string]string{"field": field}}
}

// queryTimeRange reads the optional since/until query parameters (Unix milliseconds, 0 when
// absent); since must not be after until.
func queryTimeRange(c *gin.Context) (since, until int64, err error) {
	for _, t := range []struct {
		name string
		dst  *int64
	}{{"since", &since}, {"until", &until}} {
		if v, present := c.GetQuery(t.name); present {
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < 0 || n > 1<<50 {
				return 0, 0, errBadRequest("invalid_query", t.name+" must be Unix milliseconds")
			}
			*t.dst = n
		}
	}
	if since > 0 && until > 0 && since > until {
		return 0, 0, errBadRequest("invalid_query", "since must not be after until")
	}
	return since, until, nil
}

func dryRun(c *gin.Context) (bool, error) {
	b, err := queryBool(c, "dry_run")
	if err != nil || b == nil {
		return false, err
	}
	return *b, nil
}

// queryID reads an optional id query parameter (empty when absent).
func queryID(c *gin.Context, name string) (string, error) {
	v, present := c.GetQuery(name)
	if !present || v == "" {
		return "", nil
	}
	if !keys.ValidID(v) {
		return "", errBadRequest("invalid_query", name+" must match ^[A-Za-z0-9_-]{1,128}$")
	}
	return v, nil
}

// queryRange reads ?range= of the dashboard (1h, 6h, 24h, 7d; default 1h).
func queryRange(c *gin.Context) (string, error) {
	v := c.DefaultQuery("range", "1h")
	switch v {
	case "1h", "6h", "24h", "7d":
		return v, nil
	}
	return "", errBadRequest("invalid_query", "range must be 1h, 6h, 24h or 7d")
}
