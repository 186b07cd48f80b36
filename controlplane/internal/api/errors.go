package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/internal/ledger"
	"tollgate/internal/store"
)

// Error is an API error: an HTTP status, a machine-readable code, a message for people and
// optional details (e.g. the violations of a rejected change).
type Error struct {
	Status     int
	Code       string
	Message    string
	Details    any
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func apiErr(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

func errNotFound() *Error { return apiErr(http.StatusNotFound, "not_found", "no such resource") }

func errUnauthorized(code, msg string) *Error { return apiErr(http.StatusUnauthorized, code, msg) }

func errForbidden() *Error {
	return apiErr(http.StatusForbidden, "forbidden", "your role does not allow this")
}

func errBadRequest(code, msg string) *Error { return apiErr(http.StatusBadRequest, code, msg) }

// classify maps every error of the API's dependencies to an HTTP status and a code: the one
// place where the error taxonomy meets HTTP. Bad input is always a 4xx; Redis being unavailable
// is a 503; only what is left (a bug) is a 500.
func classify(err error) *Error {
	var e *Error
	var inv *changes.InvalidError
	var rinv *rules.InvalidError
	var thr *auth.ThrottledError
	var fe *store.FieldError
	var se *ledger.ScriptError
	var dinv *durable.InvalidError
	var derr *durable.DecodeError
	var aerr *durable.ApplyError
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &inv):
		return &Error{Status: http.StatusBadRequest, Code: "config_validation_failed",
			Message: "the change breaks config rules; nothing was written",
			Details: map[string]any{"violations": inv.Result.Violations, "diff": inv.Result.Diff}}
	case errors.As(err, &rinv):
		return invalidConfig(rinv)
	case errors.As(err, &thr):
		return &Error{Status: http.StatusTooManyRequests, Code: "login_throttled",
			Message: "too many login attempts; try again later", RetryAfter: thr.RetryAfter}
	case errors.As(err, &fe):
		return errBadRequest(fe.Code, "invalid "+fe.Field)
	case errors.As(err, &se):
		return errBadRequest(se.Code, "rejected by "+se.Script)
	case errors.As(err, &dinv):
		return &Error{Status: http.StatusBadRequest, Code: "config_validation_failed",
			Message: "the document breaks config rules; nothing was written",
			Details: map[string]any{"violations": dinv.Violations}}
	case errors.As(err, &derr):
		return errBadRequest("invalid_document", derr.Msg)
	case errors.As(err, &aerr):
		msg := "a write failed; the config from before was put back"
		if !aerr.RolledBack {
			msg = "a write failed, and so did putting the config back: export and compare"
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: "apply_failed", Message: msg,
			Details: map[string]any{"rolled_back": aerr.RolledBack}}
	}
	if errors.Is(err, store.ErrBusy) {
		return &Error{Status: http.StatusServiceUnavailable, Code: "config_busy",
			Message: "another config write holds the lock; nothing was written, retry", RetryAfter: time.Second}
	}
	if e := classifySentinel(err); e != nil {
		return e
	}
	if unavailable(err) {
		return apiErr(http.StatusServiceUnavailable, "store_unavailable", "Redis is unavailable; retry later")
	}
	return apiErr(http.StatusInternalServerError, "internal_error", "internal error")
}

// invalidConfig answers a refused rule or breaker: 400 invalid_rule / invalid_breaker naming
// the first offending field and its reason, with every violation and the diff.
func invalidConfig(e *rules.InvalidError) *Error {
	d := map[string]any{"violations": e.Result.Violations, "diff": e.Result.Diff}
	if len(e.Result.Violations) > 0 {
		d["field"], d["reason"] = e.Result.Violations[0].Field, e.Result.Violations[0].Code
	}
	return &Error{Status: http.StatusBadRequest, Code: "invalid_" + e.Kind,
		Message: "the " + e.Kind + " is invalid; nothing was written", Details: d}
}

func classifySentinel(err error) *Error {
	for _, m := range []struct {
		target error
		status int
		code   string
	}{
		{changes.ErrNotFound, 404, "not_found"}, {users.ErrNotFound, 404, "not_found"},
		{ledger.ErrUnknownCluster, 404, "not_found"}, {store.ErrNotFound, 404, "not_found"},
		{changes.ErrExists, 409, "already_exists"}, {users.ErrExists, 409, "already_exists"},
		{users.ErrLastAdmin, 409, "last_admin"}, {users.ErrInvalidName, 400, "invalid_id"},
		{store.ErrInvalidID, 400, "invalid_id"}, {ledger.ErrInvalidID, 400, "invalid_id"},
		{store.ErrOverAllocation, 409, "over_allocation"}, {store.ErrUnknownCluster, 409, "unknown_cluster"},
		{store.ErrClusterChange, 409, "cluster_change"},
		{store.ErrAccessKeyInUse, 409, "access_key_in_use"}, {store.ErrInvalidAccessKey, 400, "invalid_access_key_id"},
		{store.ErrInvalidBucket, 400, "invalid_bucket"}, {changes.ErrUnknownApp, 400, "unknown_app"},
		{changes.ErrSecretsDisabled, 409, "secrets_key_not_configured"}, {changes.ErrInvalidSecret, 400, "invalid_secret"},
		{auth.ErrWeakPassword, 400, "weak_password"}, {auth.ErrUnknownRole, 400, "invalid_role"},
		{auth.ErrTokenExpired, 401, "token_expired"}, {auth.ErrTokenInvalid, 401, "invalid_token"},
		{auth.ErrRefreshInvalid, 401, "invalid_refresh_token"},
		{auth.ErrRefreshReused, 401, "refresh_token_reused"}, {auth.ErrSessionEnded, 401, "session_ended"},
		{audit.ErrBadCursor, 400, "invalid_query"}, {rules.ErrBadCursor, 400, "invalid_query"},
		{rules.ErrRuleNotFound, 404, "rule_not_found"}, {rules.ErrRuleExists, 409, "rule_exists"},
		{rules.ErrBreakerNotFound, 404, "breaker_not_found"},
		{store.ErrStoreLost, 409, "config_store_lost"}, {durable.ErrNotEmpty, 409, "store_not_empty"},
	} {
		if errors.Is(err, m.target) {
			return apiErr(m.status, m.code, m.target.Error())
		}
	}
	return nil
}

// unavailable: Redis did not answer (network, timeout, pool exhausted) or refused (an error
// reply such as READONLY, LOADING, OOM).
func unavailable(err error) bool {
	var nerr net.Error
	var rerr redis.Error
	return errors.As(err, &nerr) || errors.As(err, &rerr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, context.Canceled)
}

// envelope of every /api/v1 answer: data (and meta) on success, error on failure.
type envelope struct {
	Data      any        `json:"data,omitempty"`
	Meta      any        `json:"meta,omitempty"`
	Error     *errorBody `json:"error,omitempty"`
	RequestID string     `json:"request_id,omitempty"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func ok(c *gin.Context, status int, data any) {
	c.JSON(status, envelope{Data: data})
}

func okMeta(c *gin.Context, data, meta any) {
	c.JSON(http.StatusOK, envelope{Data: data, Meta: meta})
}

// fail answers err through classify, logging the unexpected ones, and stops the chain.
func (s *server) fail(c *gin.Context, err error) {
	e := classify(err)
	if e.Status >= 500 {
		s.opts.Logger.Error("api error", "route", c.FullPath(), "method", methodLabel(c.Request.Method),
			"status", e.Status, "code", e.Code, "err", err, "request_id", c.GetString(ctxRequestID))
	}
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	if e.Status == http.StatusUnauthorized {
		c.Header("WWW-Authenticate", `Bearer realm="tollgate", error="invalid_token"`)
	}
	c.AbortWithStatusJSON(e.Status, envelope{Error: &errorBody{Code: e.Code, Message: e.Message,
		Details: e.Details}, RequestID: c.GetString(ctxRequestID)})
}
