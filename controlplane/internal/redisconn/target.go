package redisconn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind is the Redis topology a URL names.
type Kind string

// The topologies of TOLLGATE_REDIS_URL, the same forms the Lua gateway reads.
const (
	Single   Kind = "single"   // redis://[user:password@]host:port[/db] (or rediss://)
	Sentinel Kind = "sentinel" // redis-sentinel://[:password@]host:port[,host:port...]/<master-name>[/db]
	Cluster  Kind = "cluster"  // redis-cluster://[:password@]host:port[,host:port...]
)

const (
	sentinelScheme = "redis-sentinel://"
	clusterScheme  = "redis-cluster://"
)

var (
	// ErrURL is wrapped by every error of Parse.
	ErrURL = errors.New("invalid redis url")

	masterName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

// Target is a parsed Redis URL: what to connect to, never printed with its password.
type Target struct {
	Kind       Kind
	Addrs      []string // the server, the sentinels, or the cluster's seed nodes (host:port)
	MasterName string   // Sentinel only
	Username   string
	Password   string // of the data nodes; sentinels are asked without AUTH
	DB         int    // always 0 for a cluster

	single *redis.Options // redis:// and rediss:// as go-redis parses them (TLS, query options)
}

// Parse reads a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL. Errors never
// contain the password.
func Parse(raw string) (Target, error) {
	switch {
	case strings.HasPrefix(raw, sentinelScheme):
		return parseMulti(Sentinel, strings.TrimPrefix(raw, sentinelScheme))
	case strings.HasPrefix(raw, clusterScheme):
		return parseMulti(Cluster, strings.TrimPrefix(raw, clusterScheme))
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may carry a password
		}
		return Target{}, fmt.Errorf("%w: %w", ErrURL, err)
	}
	return Target{Kind: Single, Addrs: []string{o.Addr}, Username: o.Username,
		Password: o.Password, DB: o.DB, single: o}, nil
}

// parseMulti reads [[user]:password@]host:port[,host:port...][/path] of the Sentinel and
// Cluster forms (net/url refuses a comma-separated host list).
func parseMulti(kind Kind, rest string) (Target, error) {
	t := Target{Kind: kind}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		cred := rest[:at]
		rest = rest[at+1:]
		if user, pw, ok := strings.Cut(cred, ":"); ok {
			t.Username, t.Password = user, pw
		} else {
			t.Password = cred
		}
	}
	hosts, path, _ := strings.Cut(rest, "/")
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return Target{}, fmt.Errorf("%w: %s address %q: want host:port", ErrURL, kind, h)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return Target{}, fmt.Errorf("%w: %s address %q: bad port", ErrURL, kind, h)
		}
		t.Addrs = append(t.Addrs, h)
	}
	parts := strings.Split(path, "/")
	switch kind {
	case Sentinel:
		if !masterName.MatchString(parts[0]) || len(parts) > 2 {
			return Target{}, fmt.Errorf("%w: want redis-sentinel://[:password@]host:port"+
				"[,host:port...]/<master-name>[/db]", ErrURL)
		}
		t.MasterName = parts[0]
		if len(parts) == 2 && parts[1] != "" {
			db, err := strconv.Atoi(parts[1])
			if err != nil || db < 0 {
				return Target{}, fmt.Errorf("%w: bad database number %q", ErrURL, parts[1])
			}
			t.DB = db
		}
	case Cluster:
		if path != "" && path != "0" {
			return Target{}, fmt.Errorf("%w: a cluster has only database 0, want "+
				"redis-cluster://[:password@]host:port[,host:port...]", ErrURL)
		}
	}
	return t, nil
}

// String is the URL without its password.
func (t Target) String() string {
	cred := ""
	if t.Password != "" {
		cred = t.Username + ":xxxxx@"
	}
	hosts := strings.Join(t.Addrs, ",")
	switch t.Kind {
	case Sentinel:
		return fmt.Sprintf("%s%s%s/%s/%d", sentinelScheme, cred, hosts, t.MasterName, t.DB)
	case Cluster:
		return clusterScheme + cred + hosts
	}
	scheme := "redis://"
	if t.single != nil && t.single.TLSConfig != nil {
		scheme = "rediss://"
	}
	return fmt.Sprintf("%s%s%s/%d", scheme, cred, hosts, t.DB)
}

// NewClient returns a go-redis client for the target: a plain client for one server, a
// failover client (Sentinel), or a cluster client following MOVED/ASK; context deadlines are
// honoured by reads and writes. The caller closes it.
func (t Target) NewClient() redis.UniversalClient {
	switch t.Kind {
	case Sentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            t.MasterName,
			SentinelAddrs:         t.Addrs,
			Username:              t.Username,
			Password:              t.Password,
			DB:                    t.DB,
			ContextTimeoutEnabled: true,
		})
	case Cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 t.Addrs,
			Username:              t.Username,
			Password:              t.Password,
			ContextTimeoutEnabled: true,
		})
	}
	o := *t.single
	o.ContextTimeoutEnabled = true
	return redis.NewClient(&o)
}

// Options returns the go-redis options of a single-server target (nil for Sentinel and
// Cluster targets).
func (t Target) Options() *redis.Options {
	if t.single == nil {
		return nil
	}
	o := *t.single
	o.ContextTimeoutEnabled = true
	return &o
}
