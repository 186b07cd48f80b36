package store_test

import (
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	. "tollgate/internal/store" // an external test: testutil's Fixture imports store
)

func TestListClustersAndClusterApps(t *testing.T) {
	s, rdb := newStore(t)
	c := ctx(t)
	for _, id := range []string{"c2", "c1"} {
		if _, err := s.PutCluster(c, Cluster{ID: id, Capacity: 1000, ReservedRatio: 0.1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []App{demoApp("b", 10), demoApp("a", 10)} {
		if _, err := s.PutApp(c, a); err != nil {
			t.Fatal(err)
		}
	}
	// an allocation without an index entry still belongs to the cluster
	rdb.ZAdd(c, keys.L1Apps("c1"), redis.Z{Score: 5, Member: "orphan"})
	got, err := s.ListClusters(c)
	if err != nil || !reflect.DeepEqual(got, []string{"c1", "c2"}) {
		t.Fatalf("ListClusters = %v, %v", got, err)
	}
	apps, err := s.ClusterApps(c, "c1")
	if err != nil || !reflect.DeepEqual(apps, []string{"a", "b", "orphan"}) {
		t.Fatalf("ClusterApps(c1) = %v, %v", apps, err)
	}
	if apps, err := s.ClusterApps(c, "c2"); err != nil || len(apps) != 0 {
		t.Fatalf("ClusterApps(c2) = %v, %v", apps, err)
	}
	if _, err := s.ClusterApps(c, "bad id"); err == nil {
		t.Fatal("ClusterApps with a bad id: no error")
	}
}
