package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/validate"
)

// maxDocument is the largest config document import and restore accept.
const maxDocument = 32 << 20

// configStore answers the config store's state: epoch, version, lost or not, persistence,
// newest snapshot.
func (s *server) configStore(c *gin.Context) {
	if s.opts.Guard == nil {
		s.fail(c, errNotFound())
		return
	}
	ok(c, http.StatusOK, s.opts.Guard.Status())
}

// exportConfig answers the whole config as JSON (default) or YAML (?format=yaml); the users
// and the JWT secret only with ?secrets=true, which takes the admin role.
func (s *server) exportConfig(c *gin.Context) {
	format, err := docFormat(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	secrets, err := queryBool(c, "secrets")
	if err != nil {
		s.fail(c, err)
		return
	}
	withSecrets := secrets != nil && *secrets
	if p, _ := principalOf(c); withSecrets && !p.Role.Allows(auth.Admin) {
		s.fail(c, errForbidden())
		return
	}
	doc, err := s.opts.Writer.Export(c.Request.Context(), withSecrets)
	if err != nil {
		s.fail(c, err)
		return
	}
	body, err := durable.Encode(doc, format)
	if err != nil {
		s.fail(c, err)
		return
	}
	if withSecrets {
		_ = s.opts.Audit.Record(c.Request.Context(), audit.Entry{Action: "config.export_secrets",
			Resource: "config", Outcome: audit.OK})
	}
	ct := "application/json"
	if format == "yaml" {
		ct = "application/yaml"
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, ct, body)
}

func docFormat(c *gin.Context) (string, error) {
	switch f := c.DefaultQuery("format", "json"); f {
	case "json", "yaml":
		return f, nil
	default:
		return "", errBadRequest("invalid_query", "format must be json or yaml")
	}
}

// applyParam reads ?apply=true: import and restore are dry runs unless asked.
func applyParam(c *gin.Context) (bool, error) {
	b, err := queryBool(c, "apply")
	if err != nil || b == nil {
		return false, err
	}
	return *b, nil
}

type importResult struct {
	Applied    bool                 `json:"applied"`
	DryRun     bool                 `json:"dry_run"`
	Valid      bool                 `json:"valid"`
	Violations []validate.Violation `json:"violations"`
	Diff       []validate.DiffEntry `json:"diff"`
	Version    int64                `json:"config_version,omitempty"`
}

func (s *server) readDocument(c *gin.Context) (durable.Document, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxDocument))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return durable.Document{}, apiErr(http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("the document must be at most %d bytes", maxDocument))
	}
	if err != nil {
		return durable.Document{}, errBadRequest("invalid_body", "the body could not be read")
	}
	return durable.Decode(body)
}

// configViolations: GET /config/violations — what of the stored config the config contract
// refuses (e.g. written before it, or by hand) and any app whose L2 state is not what the API
// shows (durable.StoredViolations), named by id; it also sets
// the gauge tollgate_cp_config_violations. Such config stays editable: a change that fixes it
// is accepted.
func (s *server) configViolations(c *gin.Context) {
	vs, _, err := s.opts.Writer.StoredViolations(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	s.opts.Metrics.ConfigViolations(len(vs))
	ok(c, http.StatusOK, gin.H{"count": len(vs), "violations": vs})
}

// importConfig makes the config what the document says: a dry run (the diff and the
// violations) unless ?apply=true; applied as a whole or not at all; audited either way.
func (s *server) importConfig(c *gin.Context) {
	apply, err := applyParam(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	doc, err := s.readDocument(c)
	if err != nil {
		s.auditConfig(c, "config.import", audit.Rejected, map[string]any{"error": "invalid_document"})
		s.fail(c, err)
		return
	}
	if s.opts.Guard != nil && s.opts.Guard.Lost() {
		s.fail(c, errStoreLost())
		return
	}
	cur, err := s.opts.Writer.Export(ctx, doc.Users != nil)
	if err != nil {
		s.fail(c, err)
		return
	}
	vs := durable.Plan(cur, doc)
	res := importResult{DryRun: !apply, Valid: len(vs) == 0, Violations: vs, Diff: durable.Diff(cur, doc)}
	if !apply || len(vs) > 0 {
		outcome := audit.OK
		if len(vs) > 0 {
			outcome = audit.Rejected
		}
		s.auditConfig(c, dryAction("config.import", !apply), outcome, map[string]any{"changes": len(res.Diff), "violations": len(vs)})
		if apply {
			s.fail(c, &durable.InvalidError{Violations: vs})
			return
		}
		ok(c, http.StatusOK, res)
		return
	}
	if err := s.opts.Writer.Apply(ctx, cur, doc); err != nil {
		s.auditConfig(c, "config.import", audit.Failed, map[string]any{"changes": len(res.Diff)})
		s.fail(c, err)
		return
	}
	res.Applied = true
	res.Version, _ = s.opts.Writer.Store.ConfigVersion(ctx)
	s.auditConfig(c, "config.import", audit.OK, map[string]any{"changes": len(res.Diff), "config_version": res.Version})
	ok(c, http.StatusOK, res)
}

func dryAction(a string, dry bool) string {
	if dry {
		return a + ".dry_run"
	}
	return a
}

func (s *server) auditConfig(c *gin.Context, action, outcome string, d map[string]any) {
	_ = s.opts.Audit.Record(c.Request.Context(), audit.Entry{Action: action, Resource: "config",
		Outcome: outcome, Details: audit.Details(d)})
}

func errStoreLost() *Error {
	return apiErr(http.StatusConflict, "config_store_lost",
		"the config store is lost (see GET /api/v1/config/store); restore a snapshot first")
}

// listBackups lists the snapshots of the backup directory, newest first.
func (s *server) listBackups(c *gin.Context) {
	if s.opts.Backups == nil {
		ok(c, http.StatusOK, []string{})
		return
	}
	names, err := s.opts.Backups.List()
	if err != nil {
		s.fail(c, err)
		return
	}
	if names == nil {
		names = []string{}
	}
	ok(c, http.StatusOK, names)
}

type restoreBody struct {
	Snapshot string `json:"snapshot"`
}

// restoreConfig puts a snapshot back into an empty or lost store: ?snapshot=<name> (default the
// newest); a dry run with the diff unless ?apply=true; audited.
func (s *server) restoreConfig(c *gin.Context) {
	apply, err := applyParam(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if s.opts.Guard == nil || s.opts.Backups == nil {
		s.fail(c, errNotFound())
		return
	}
	name := c.Query("snapshot")
	var snap *durable.Snapshot
	if name == "" {
		snap, name, err = s.opts.Backups.Latest()
	} else {
		snap, err = s.opts.Backups.Load(name)
	}
	if err == nil && snap == nil {
		err = apiErr(http.StatusNotFound, "no_snapshot", "the backup directory holds no snapshot")
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			err = apiErr(http.StatusNotFound, "no_snapshot", "no such snapshot")
		}
		s.fail(c, err)
		return
	}
	diff, err := s.opts.Guard.Restore(c.Request.Context(), s.opts.Writer, snap.Config, snap.Epoch, snap.Version, !apply)
	d := map[string]any{"snapshot": name}
	if err != nil {
		s.auditConfig(c, dryAction("config.restore", !apply), audit.Failed, d)
		s.fail(c, err)
		return
	}
	d["changes"] = len(diff)
	s.auditConfig(c, dryAction("config.restore", !apply), audit.OK, d)
	ok(c, http.StatusOK, gin.H{"applied": apply, "dry_run": !apply, "snapshot": name, "diff": diff,
		"store": s.opts.Guard.Status()})
}
