package durable

// The config document: its format (Kind), its types, and their encoding as JSON or YAML.

import (
	"bytes"
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"

	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/store"
)

// Kind names the document format.
const Kind = "tollgate-config/v1"

// Document is the whole config (no counters, no runtime state): what export writes and import,
// restore and the snapshots read. Users and the JWT secret are present only when exported with
// secrets; an import without them leaves the store's users and secret alone.
type Document struct {
	Kind      string          `json:"kind"`
	Clusters  []Cluster       `json:"clusters"`
	Apps      []App           `json:"apps"`
	Rules     []rules.Rule    `json:"rules"`
	Breakers  []rules.Breaker `json:"breakers"`
	Users     []users.User    `json:"users,omitempty"`
	JWTSecret string          `json:"jwt_secret,omitempty"`
}

// Cluster is a storage cluster (L1) with its connection limits (nil: the gateway defaults).
type Cluster struct {
	ID            string       `json:"id"`
	Capacity      int64        `json:"capacity"`
	ReservedRatio float64      `json:"reserved_ratio"`
	Connections   *ClusterConn `json:"connections,omitempty"`
}

// ClusterConn are a cluster's connection limits.
type ClusterConn = validate.ClusterConnLimits

// App is an app (L2) with its connection limits (nil: the gateway defaults), its S3 access key
// ids and the buckets mapped to it (ratelimit:access_keys, ratelimit:buckets).
type App struct {
	store.App
	Connections *validate.ConnLimits `json:"connections,omitempty"`
	AccessKeys  []string             `json:"access_keys,omitempty"`
	Buckets     []string             `json:"buckets,omitempty"`
	// AccessKeySecrets are the secrets of its access keys, sealed (internal/secrets: they open
	// only with the secrets key file that sealed them); exported with secrets only.
	AccessKeySecrets map[string]string `json:"access_key_secrets,omitempty"`
}

// Encode writes the document as "json" (indented) or "yaml".
func Encode(d Document, format string) ([]byte, error) {
	j, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	if format != "yaml" {
		return append(j, '\n'), nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return yaml.Marshal(numbers(v))
}

// numbers turns json.Number into int64 or float64 for the YAML encoder.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// DecodeError is a document that does not parse; nothing was changed.
type DecodeError struct{ Msg string }

func (e *DecodeError) Error() string { return "durable: bad document: " + e.Msg }

// Decode reads a document in JSON or YAML (told apart by its first character), strictly: an
// unknown field, a wrong type or trailing data is an error.
func Decode(b []byte) (Document, error) {
	var d Document
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return d, &DecodeError{"empty document"}
	}
	if t[0] != '{' {
		var v any
		if err := yaml.Unmarshal(t, &v); err != nil {
			return d, &DecodeError{"yaml: " + err.Error()}
		}
		j, err := json.Marshal(v)
		if err != nil {
			return d, &DecodeError{"yaml: " + err.Error()}
		}
		t = j
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, &DecodeError{err.Error()}
	}
	if dec.More() {
		return d, &DecodeError{"trailing data after the document"}
	}
	if d.Kind != Kind {
		return d, &DecodeError{fmt.Sprintf("kind %q: want %q", d.Kind, Kind)}
	}
	return d, nil
}
