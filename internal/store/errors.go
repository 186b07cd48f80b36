package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Error taxonomy of the store; callers classify with errors.Is / errors.As.
var (
	// ErrInvalidID: an id does not match ^[A-Za-z0-9_-]{1,128}$.
	ErrInvalidID = errors.New("invalid id")
	// ErrInvalid: a config value was rejected (see *FieldError for the field).
	ErrInvalid = errors.New("invalid config")
	// ErrUnknownCluster: the app names a cluster that has no L1 config.
	ErrUnknownCluster = errors.New("unknown cluster")
	// ErrNotFound: no such app or cluster.
	ErrNotFound = errors.New("not found")
	// ErrClusterChange: an existing app cannot move to another cluster.
	ErrClusterChange = errors.New("app belongs to another cluster")
	// ErrOverAllocation: guaranteed quotas would exceed (1 - reserved_ratio) x capacity
	// (Property 11, the contract's one cap; see docs/config-contract.md); nothing was written.
	ErrOverAllocation = errors.New("guaranteed quotas exceed the cluster's allocatable capacity")
)

// FieldError is a rejected config field; it matches ErrInvalid.
type FieldError struct {
	Field string // snake_case name, e.g. "burst_quota"
	Code  string // the script's reply code, e.g. "invalid_burst_quota"
}

func (e *FieldError) Error() string { return fmt.Sprintf("invalid %s (%s)", e.Field, e.Code) }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalidField(field string) error {
	return &FieldError{Field: field, Code: "invalid_" + field}
}

func invalidID(kind, id string) error {
	return fmt.Errorf("%s id %q: %w", kind, id, ErrInvalidID)
}

// classifyScriptError turns a script's error reply (e.g. "unknown_cluster" or, as Redis 7.0
// sends it, "ERR unknown_cluster") into a typed error; other errors pass through unchanged.
func classifyScriptError(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	code := strings.TrimPrefix(rerr.Error(), "ERR ")
	switch {
	case code == "unknown_cluster":
		return ErrUnknownCluster
	case code == "over_allocation":
		return ErrOverAllocation
	case code == "burst_below_guaranteed":
		return &FieldError{Field: "burst_quota", Code: code}
	case strings.HasPrefix(code, "invalid_") && !strings.ContainsAny(code, " :"):
		return &FieldError{Field: strings.TrimPrefix(code, "invalid_"), Code: code}
	default:
		return err
	}
}
