package api

import (
	"fmt"
	"testing"

	"tollgate/controlplane/internal/changes"
	"tollgate/internal/store"
)

// TestOneErrorVocabulary: every error of the config write path gets the same code from the API
// (classify: what a client reads) and from the audit log (changes.ErrorCode: what an auditor
// reads).
func TestOneErrorVocabulary(t *testing.T) {
	for _, err := range []error{
		changes.ErrExists, changes.ErrNotFound, changes.ErrUnknownApp,
		store.ErrNotFound, store.ErrOverAllocation, store.ErrUnknownCluster, store.ErrClusterChange,
		store.ErrAccessKeyInUse, store.ErrInvalidAccessKey, store.ErrInvalidBucket, store.ErrInvalidID,
		store.ErrBusy, store.ErrStoreLost,
		&store.FieldError{Field: "burst_quota", Code: "burst_below_guaranteed"},
	} {
		wrapped := fmt.Errorf("somewhere: %w", err)
		if api, audit := classify(wrapped).Code, changes.ErrorCode(wrapped); api != audit {
			t.Errorf("%v: the API answers %q, the audit log records %q", err, api, audit)
		}
	}
}
