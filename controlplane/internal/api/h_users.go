package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/users"
	"tollgate/internal/keys"
)

type createUserRequest struct {
	Username string    `json:"username"`
	Password string    `json:"password"`
	Role     auth.Role `json:"role"`
}

type updateUserRequest struct {
	Role     *auth.Role `json:"role,omitempty"`
	Password *string    `json:"password,omitempty"`
	Disabled *bool      `json:"disabled,omitempty"`
}

// pathID reads a path parameter that must be a valid id (400 invalid_id otherwise).
func pathID(c *gin.Context, name string) (string, error) {
	v := c.Param(name)
	if !keys.ValidID(v) {
		return "", errBadRequest("invalid_id", name+" must match ^[A-Za-z0-9_-]{1,128}$")
	}
	return v, nil
}

func (s *server) listUsers(c *gin.Context) {
	all, err := s.opts.Users.List(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]users.View, 0, len(all))
	for _, u := range all {
		out = append(out, u.View())
	}
	okMeta(c, out, gin.H{"total": len(out)})
}

func (s *server) createUser(c *gin.Context) {
	var in createUserRequest
	if err := s.decodeJSON(c, &in); err != nil {
		s.fail(c, err)
		return
	}
	u, err := s.opts.Users.Create(c.Request.Context(), in.Username, in.Password, in.Role)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.auditUser(c, "user.create", u.Username, gin.H{"role": u.Role})
	ok(c, http.StatusCreated, u.View())
}

func (s *server) getUser(c *gin.Context) {
	name, err := pathID(c, "username")
	if err != nil {
		s.fail(c, err)
		return
	}
	u, err := s.opts.Users.Get(c.Request.Context(), name)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, u.View())
}

func (s *server) updateUser(c *gin.Context) {
	name, err := pathID(c, "username")
	if err != nil {
		s.fail(c, err)
		return
	}
	var in updateUserRequest
	if err := s.decodeJSON(c, &in); err != nil {
		s.fail(c, err)
		return
	}
	u, err := s.opts.Users.Update(c.Request.Context(), name,
		users.Patch{Role: in.Role, Password: in.Password, Disabled: in.Disabled})
	if err != nil {
		s.fail(c, err)
		return
	}
	s.endSessions(c, name)
	s.auditUser(c, "user.update", name, gin.H{"role": u.Role, "disabled": u.Disabled,
		"password_changed": in.Password != nil})
	ok(c, http.StatusOK, u.View())
}

func (s *server) deleteUser(c *gin.Context) {
	name, err := pathID(c, "username")
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.opts.Users.Delete(c.Request.Context(), name); err != nil {
		s.fail(c, err)
		return
	}
	s.endSessions(c, name)
	s.auditUser(c, "user.delete", name, nil)
	ok(c, http.StatusOK, gin.H{"deleted": name})
}

// endSessions revokes the sessions of a user that was changed or deleted. The user record's
// TokensAfter already refuses them; this also deletes them, so their refresh tokens are gone.
func (s *server) endSessions(c *gin.Context, name string) {
	if err := s.opts.Sessions.RevokeUser(c.Request.Context(), name); err != nil {
		s.opts.Logger.Warn("sessions not revoked (the user record still refuses them)", "user", name, "err", err)
	}
}

func (s *server) auditUser(c *gin.Context, action, name string, details any) {
	e := audit.Entry{Action: action, Resource: "user/" + name, Outcome: audit.OK}
	if details != nil {
		e.Details = audit.Details(details)
	}
	_ = s.opts.Audit.Record(c.Request.Context(), e)
}
