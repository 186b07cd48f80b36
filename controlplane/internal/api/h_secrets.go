package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/changes"
	"tollgate/internal/secrets"
)

// checkSecret: the 4xx of a secret that cannot be stored, before anything is written.
func (s *server) checkSecret(secret string) error {
	if !secrets.ValidSecret(secret) {
		return changes.ErrInvalidSecret
	}
	if !s.opts.Changes.SecretsEnabled() {
		return changes.ErrSecretsDisabled
	}
	return nil
}

// putAccessKeySecret: PUT /apps/:id/access-keys/:key/secret {"secret_access_key": "…"}: the
// secret is sealed (AES-256-GCM with the secrets key file) and stored; from then on the gateways
// verify the key's signatures. 200 with has_secret, never the secret; 404 when the app does not
// hold the key; 409 secrets_key_not_configured without a key file; 400 invalid_secret.
func (s *server) putAccessKeySecret(c *gin.Context) {
	var in struct {
		SecretAccessKey *string `json:"secret_access_key"`
	}
	w, read := s.readLiveWrite(c, &in)
	if !read {
		return
	}
	if in.SecretAccessKey == nil {
		s.fail(c, errMissing("secret_access_key"))
		return
	}
	if err := s.checkSecret(*in.SecretAccessKey); err != nil {
		s.fail(c, err)
		return
	}
	key := c.Param("key")
	out, err := s.opts.Changes.SetAccessKeySecret(c.Request.Context(), w.actor, w.id, key, *in.SecretAccessKey)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, accessKeyChange{AppID: w.id, AccessKeyID: key, HasSecret: true, IdentityChange: out})
}

// deleteAccessKeySecret: DELETE /apps/:id/access-keys/:key/secret, 204: the gateways stop
// verifying the key's signatures (the backend still does).
func (s *server) deleteAccessKeySecret(c *gin.Context) {
	w, read := s.readLiveWrite(c, nil)
	if !read {
		return
	}
	if _, err := s.opts.Changes.DeleteAccessKeySecret(c.Request.Context(), w.actor, w.id, c.Param("key")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
