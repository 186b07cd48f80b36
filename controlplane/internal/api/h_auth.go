package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/users"
	"tollgate/internal/keys"
)

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type refreshRequest struct {
	RefreshToken string `json:"refresh_token"`
}

type passwordRequest struct {
	CurrentPassword string `json:"current_password"`
	NewPassword     string `json:"new_password"`
}

type tokenResponse struct {
	AccessToken      string     `json:"access_token"`
	TokenType        string     `json:"token_type"`
	ExpiresIn        int64      `json:"expires_in"`
	ExpiresAt        int64      `json:"expires_at"`
	RefreshToken     string     `json:"refresh_token"`
	RefreshExpiresAt int64      `json:"refresh_expires_at"`
	User             users.View `json:"user"`
}

// errBadCredentials is the one answer for an unknown user, a wrong password and a disabled
// account, so that a login never tells which accounts exist.
func errBadCredentials() *Error {
	return errUnauthorized("invalid_credentials", "invalid username or password")
}

func (s *server) login(c *gin.Context) {
	var in loginRequest
	if err := s.decodeJSON(c, &in); err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	actor := in.Username
	if !keys.ValidID(actor) {
		actor = "_invalid"
	}
	if err := s.opts.Throttle.Begin(ctx, in.Username, c.ClientIP()); err != nil {
		s.auditAuth(ctx, actor, "auth.login", audit.Denied, "throttled")
		s.fail(c, err)
		return
	}
	u, err := s.opts.Users.Get(ctx, in.Username)
	if err != nil && !errors.Is(err, users.ErrNotFound) {
		s.fail(c, err)
		return
	}
	hash := ""
	if err == nil && !u.Disabled {
		hash = u.PasswordHash
	}
	if !s.opts.Hasher.Check(hash, in.Password) {
		_ = s.opts.Throttle.Failed(ctx, in.Username, c.ClientIP())
		s.auditAuth(ctx, actor, "auth.login", audit.Denied, "invalid_credentials")
		s.fail(c, errBadCredentials())
		return
	}
	_ = s.opts.Throttle.Succeeded(ctx, in.Username, c.ClientIP())
	ses, refresh, err := s.opts.Sessions.Create(ctx, u.Username)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.issue(c, u, ses, refresh, "auth.login")
}

// issue answers a login or refresh with a new access token for the session.
func (s *server) issue(c *gin.Context, u users.User, ses auth.Session, refresh, action string) {
	access, exp, err := s.opts.Tokens.Issue(u.Username, u.Role, ses.ID)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.auditAuth(c.Request.Context(), u.Username, action, audit.OK, "")
	ok(c, http.StatusOK, tokenResponse{AccessToken: access, TokenType: "Bearer",
		ExpiresIn: int64(time.Until(exp).Round(time.Second) / time.Second), ExpiresAt: exp.Unix(),
		RefreshToken: refresh, RefreshExpiresAt: ses.Expires.Unix(), User: u.View()})
}

func (s *server) refresh(c *gin.Context) {
	var in refreshRequest
	if err := s.decodeJSON(c, &in); err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	ses, next, err := s.opts.Sessions.Rotate(ctx, in.RefreshToken)
	if errors.Is(err, auth.ErrRefreshReused) {
		s.auditAuth(ctx, "", "auth.refresh_reused", audit.Denied, "session revoked: "+ses.ID)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	u, err := s.opts.Users.Get(ctx, ses.User)
	if errors.Is(err, users.ErrNotFound) || err == nil && !u.Valid(ses.Created.UnixMilli()) {
		_ = s.opts.Sessions.Revoke(ctx, ses.ID)
		s.fail(c, auth.ErrSessionEnded)
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	s.issue(c, u, ses, next, "auth.refresh")
}

func (s *server) logout(c *gin.Context) {
	var in refreshRequest
	if err := s.decodeJSON(c, &in); err != nil {
		s.fail(c, err)
		return
	}
	ses, err := s.opts.Sessions.Logout(c.Request.Context(), in.RefreshToken)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.auditAuth(c.Request.Context(), ses.User, "auth.logout", audit.OK, "")
	ok(c, http.StatusOK, gin.H{"logged_out": true})
}

func (s *server) me(c *gin.Context) {
	p, _ := principalOf(c)
	u, err := s.opts.Users.Get(c.Request.Context(), p.User)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, gin.H{"user": u.View(), "session_expires_at": p.Expires.Unix()})
}

func (s *server) changePassword(c *gin.Context) {
	var in passwordRequest
	if err := s.decodeJSON(c, &in); err != nil {
		s.fail(c, err)
		return
	}
	p, _ := principalOf(c)
	ctx := c.Request.Context()
	if err := s.opts.Throttle.Begin(ctx, p.User, c.ClientIP()); err != nil {
		s.fail(c, err)
		return
	}
	u, err := s.opts.Users.Get(ctx, p.User)
	if err != nil {
		s.fail(c, err)
		return
	}
	if !s.opts.Hasher.Check(u.PasswordHash, in.CurrentPassword) {
		_ = s.opts.Throttle.Failed(ctx, p.User, c.ClientIP())
		s.auditAuth(ctx, p.User, "auth.password", audit.Denied, "invalid_credentials")
		s.fail(c, errBadRequest("invalid_current_password", "the current password is wrong"))
		return
	}
	_ = s.opts.Throttle.Succeeded(ctx, p.User, c.ClientIP())
	if _, err := s.opts.Users.Update(ctx, p.User, users.Patch{Password: &in.NewPassword}); err != nil {
		s.fail(c, err)
		return
	}
	s.endSessions(c, p.User)
	s.auditAuth(ctx, p.User, "auth.password", audit.OK, "")
	ok(c, http.StatusOK, gin.H{"changed": true, "relogin_required": true})
}

func (s *server) auditAuth(ctx context.Context, actor, action, outcome, detail string) {
	e := audit.Entry{Actor: actor, Action: action, Outcome: outcome, Resource: "user/" + actor}
	if r, _ := audit.FromContext(ctx); r.Actor == "" && outcome != audit.OK {
		e.Anonymous = true // a failed login or refresh: anyone can cause it, it must not evict
	}
	if !keys.ValidID(actor) {
		e.Resource = ""
	}
	if detail != "" {
		e.Details = audit.Details(map[string]string{"reason": detail})
	}
	_ = s.opts.Audit.Record(ctx, e)
}
