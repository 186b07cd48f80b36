package changes

import (
	"context"

	"tollgate/internal/store"
)

// CatalogStore is what the catalog reads (implemented by *store.Store).
type CatalogStore interface {
	GetCluster(ctx context.Context, id string) (store.Cluster, error)
	GetApps(ctx context.Context, ids []string) (map[string]store.App, error)
	ClusterAllocated(ctx context.Context, cluster string) (int64, error)
}

// Catalog is what the validator and the rules read of the config: a cluster, the apps of a
// change by id, a cluster's maintained allocated sum. Each read costs the same whatever the
// number of apps; nothing here lists every app (lists page the id and value indexes).
type Catalog struct {
	st CatalogStore
}

// NewCatalog returns a catalog over st.
func NewCatalog(st CatalogStore) *Catalog { return &Catalog{st: st} }

// GetCluster reads a cluster (not cached: one HMGET).
func (c *Catalog) GetCluster(ctx context.Context, id string) (store.Cluster, error) {
	return c.st.GetCluster(ctx, id)
}

// GetApps reads the apps of ids (not cached: one HMGET, whatever the number of apps).
func (c *Catalog) GetApps(ctx context.Context, ids []string) (map[string]store.App, error) {
	return c.st.GetApps(ctx, ids)
}

// ClusterAllocated reads a cluster's maintained allocated sum (not cached: one HGET).
func (c *Catalog) ClusterAllocated(ctx context.Context, cluster string) (int64, error) {
	return c.st.ClusterAllocated(ctx, cluster)
}
