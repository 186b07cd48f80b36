package durable

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Persistence is whether the control plane's Redis keeps acknowledged writes, from CONFIG GET
// (a managed Redis that forbids CONFIG reads as "unknown").
type Persistence struct {
	Persists    string `json:"persists"` // aof, snapshots_only, no, unknown
	AppendOnly  string `json:"appendonly,omitempty"`
	AppendFsync string `json:"appendfsync,omitempty"`
	Save        string `json:"save,omitempty"`
	Replicas    int    `json:"replicas"` // connected replicas of the master
}

// Probe reads the persistence settings.
func Probe(ctx context.Context, rdb redis.UniversalClient) Persistence {
	p := Persistence{Persists: "unknown", Replicas: connectedReplicas(ctx, rdb)}
	m, err := rdb.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return p
	}
	p.AppendOnly = m["appendonly"]
	if m, err := rdb.ConfigGet(ctx, "appendfsync").Result(); err == nil {
		p.AppendFsync = m["appendfsync"]
	}
	if m, err := rdb.ConfigGet(ctx, "save").Result(); err == nil {
		p.Save = m["save"]
	}
	switch {
	case p.AppendOnly == "yes":
		p.Persists = "aof"
	case p.Save != "":
		p.Persists = "snapshots_only"
	case p.AppendOnly == "no":
		p.Persists = "no"
	}
	return p
}
