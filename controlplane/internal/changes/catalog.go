package changes

import (
	"context"
	"sync"

	"tollgate/internal/store"
)

// CatalogStore is what the catalog reads (implemented by *store.Store).
type CatalogStore interface {
	ListApps(ctx context.Context) ([]store.App, error)
	GetCluster(ctx context.Context, id string) (store.Cluster, error)
	ConfigVersion(ctx context.Context) (int64, error)
	GetApps(ctx context.Context, ids []string) (map[string]store.App, error)
	ClusterAllocated(ctx context.Context, cluster string) (int64, error)
}

// Catalog caches the app list per config version: every write of an app bumps the version
// after writing the index, so while the version stays, the list read at it is current, and a
// read costs one GET instead of an HSCAN of every app. It implements validate.State, so the
// validator checks changes against the same list. The returned slice is shared: read only.
type Catalog struct {
	st      CatalogStore
	reading sync.Mutex // one HSCAN at a time: concurrent misses share its result
	mu      sync.Mutex
	version int64
	apps    []store.App
}

// NewCatalog returns a catalog over st.
func NewCatalog(st CatalogStore) *Catalog { return &Catalog{st: st} }

// ListApps returns every app sorted by id, as of the current config version.
func (c *Catalog) ListApps(ctx context.Context) ([]store.App, error) {
	v, err := c.st.ConfigVersion(ctx)
	if err != nil {
		return nil, err
	}
	if apps, ok := c.cached(v); ok {
		return apps, nil
	}
	c.reading.Lock()
	defer c.reading.Unlock()
	if apps, ok := c.cached(v); ok { // read by the caller we waited for
		return apps, nil
	}
	apps, err := c.st.ListApps(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.apps == nil || c.version <= v {
		c.apps, c.version = apps, v
	}
	c.mu.Unlock()
	return apps, nil
}

// cached returns the list if it was read at version v or later (a list read after v is as
// current as one read at v).
func (c *Catalog) cached(v int64) ([]store.App, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apps, c.apps != nil && c.version >= v
}

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
