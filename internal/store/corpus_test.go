package store_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// configCase is one entry of testdata/config/ (testdata/README.md).
type configCase struct {
	Name      string          `json:"name"`
	App       json.RawMessage `json:"app"`
	Cluster   json.RawMessage `json:"cluster"`
	Allocated int64           `json:"allocated"`
	Field     string          `json:"field"`
	Reason    string          `json:"reason"`
}

func loadCorpus(t *testing.T, name string) []configCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "config", name))
	if err != nil {
		t.Fatal(err)
	}
	var cs []configCase
	if err := json.Unmarshal(b, &cs); err != nil || len(cs) == 0 {
		t.Fatalf("%s: %v (%d cases)", name, err, len(cs))
	}
	return cs
}

// reason is the contract's code for an error of the store (the scripts' replies, typed by
// classifyScriptError) and the field it names ("" when it names none).
func reason(err error) (field, code string) {
	var fe *store.FieldError
	switch {
	case errors.As(err, &fe):
		return fe.Field, fe.Code
	case errors.Is(err, store.ErrOverAllocation):
		return "", "over_allocation"
	case errors.Is(err, store.ErrUnknownCluster):
		return "", "unknown_cluster"
	case errors.Is(err, store.ErrInvalidID):
		return "", "invalid_id"
	}
	return "", err.Error()
}

// scriptsSkip: the corpus' cases the scripts do not see — a required field or a wrong type
// (the JSON decoding in front of them refuses those), connection limits (written by HSET,
// checked by the contract in Go and by the gateway's parser).
func scriptsSkip(c configCase) bool {
	return c.Reason == "required" || c.Reason == "invalid_type" || c.Field == "max_connections" ||
		c.Field == "burst_connections"
}

// TestConfigContractCorpus: app_config and cluster_config (through the store, over a real
// Redis) accept every valid app and cluster of testdata/config/ and refuse every invalid one
// they see with its reason (and its field, when the reply names one): the gateway-side
// enforcement agrees with the contract the API checks.
func TestConfigContractCorpus(t *testing.T) {
	f := testutil.NewFixture(t)
	fresh := func() {
		if err := f.RDB.FlushDB(f.Ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Store.PutCluster(f.Ctx, store.Cluster{ID: "corpus", Capacity: 1000, ReservedRatio: 0.1}); err != nil {
			t.Fatal(err)
		}
	}
	putApp := func(c configCase) error {
		a := store.App{CBw: 1, Enabled: true} // the contract's defaults
		if err := json.Unmarshal(c.App, &a); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		_, err := f.Store.PutApp(f.Ctx, a)
		return err
	}
	putCluster := func(c configCase) error {
		cl := store.Cluster{ReservedRatio: 0.1}
		if err := json.Unmarshal(c.Cluster, &cl); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if c.Allocated > 0 {
			held := store.Cluster{ID: cl.ID, Capacity: 1000000}
			a := store.App{AppID: "held", ClusterID: cl.ID, GuaranteedQuota: c.Allocated, BurstQuota: c.Allocated, Priority: 1}
			if _, err := f.Store.PutCluster(f.Ctx, held); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Store.PutApp(f.Ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		_, err := f.Store.PutCluster(f.Ctx, cl)
		return err
	}
	check := func(kind string, put func(configCase) error) {
		for _, c := range loadCorpus(t, kind+"/valid.json") {
			fresh()
			if err := put(c); err != nil {
				t.Errorf("valid %s %q refused: %v", kind, c.Name, err)
			}
		}
		for _, c := range loadCorpus(t, kind+"/invalid.json") {
			if scriptsSkip(c) {
				continue
			}
			fresh()
			err := put(c)
			if err == nil {
				t.Errorf("invalid %s %q accepted", kind, c.Name)
				continue
			}
			if field, code := reason(err); code != c.Reason || (field != "" && field != c.Field) {
				t.Errorf("invalid %s %q: want %s %s, got %s %s (%v)", kind, c.Name, c.Field, c.Reason, field, code, err)
			}
		}
	}
	check("apps", putApp)
	check("clusters", putCluster)
}
