// Package keys builds the Redis key and channel names of tollgate. The formats are a contract
// shared with the Lua gateway and fixed by testdata/keys.golden; per-cluster keys carry the
// Redis Cluster hash tag {<cluster_id>} so every multi-key script stays in one slot.
//
// Builders do not validate: callers check every id with ValidID before building a key.
package keys

const (
	rlPrefix   = "ratelimit:"
	connPrefix = "connlimit:"
	maxIDLen   = 128
)

func tag(cluster string) string { return "{" + cluster + "}" }

// L1 is the hash of a storage cluster's L1 state (capacity, allocated, available, borrowed).
func L1(cluster string) string { return rlPrefix + tag(cluster) + ":l1" }

// L1Apps is the sorted set app -> guaranteed quota of a cluster's allocations.
func L1Apps(cluster string) string { return L1(cluster) + ":apps" }

// L2 is the hash of an app's L2 bucket (config and refill state).
func L2(cluster, app string) string { return rlPrefix + tag(cluster) + ":l2:" + app }

// Leases is the hash of per-node lease accounting of an app.
func Leases(cluster, app string) string { return rlPrefix + tag(cluster) + ":leases:" + app }

// Stats is the hash of an app's consumption statistics.
func Stats(cluster, app string) string { return rlPrefix + tag(cluster) + ":stats:" + app }

// Nodes is the sorted set node -> last contact (Unix seconds) of an app.
func Nodes(cluster, app string) string { return rlPrefix + tag(cluster) + ":nodes:" + app }

// Active is the sorted set app -> last grant or report (Unix seconds) of a cluster: the apps
// gateways used lately, marked by l2_grant and l3_report and dropped by l2_reconcile once idle
// with nothing left to reconcile. The periodic jobs and the live collector visit these apps.
func Active(cluster string) string { return rlPrefix + tag(cluster) + ":active" }

// Debtors is the set of a cluster's apps in debt: added by the borrowing l2_grant (and by
// l2_reconcile on finding debt), removed by l2_refill once the debt is repaid. It also holds the
// placeholder "" (written with the cluster), so that it always exists.
func Debtors(cluster string) string { return rlPrefix + tag(cluster) + ":debtors" }

// Totals is the hash of a cluster's cumulative reported consumption (total_consumed,
// total_requests), kept by l3_report next to the apps' stats hashes.
func Totals(cluster string) string { return rlPrefix + tag(cluster) + ":totals" }

// EmergencyHistory is the stream of a cluster's emergency activations and deactivations.
func EmergencyHistory(cluster string) string { return rlPrefix + tag(cluster) + ":emergency:history" }

// ConnConfig is the connection-limiter config of an app.
func ConnConfig(cluster, app string) string { return connPrefix + tag(cluster) + ":config:" + app }

// ConnLimited is the set of a cluster's apps that have a ConnConfig hash, written with it (a node
// loading every app reads the limits of these apps only, when ConnIndexed is set).
func ConnLimited(cluster string) string { return connPrefix + tag(cluster) + ":limited" }

// ConnIndexed is set once the ConnLimited sets hold every app with connection limits (the
// control plane builds them at start from the ConnConfig hashes of a store written before them).
func ConnIndexed() string { return connPrefix + "indexed" }

// ConnCluster is the connection-limiter config of a cluster.
func ConnCluster(cluster string) string { return connPrefix + tag(cluster) + ":cluster" }

// ConnNodeStats is the hash of one gateway node's connection statistics for an app (current,
// peak, rejected, last_seen), written every 10 s with a 300 s TTL; the control plane sums nodes.
func ConnNodeStats(cluster, app, node string) string {
	return connPrefix + tag(cluster) + ":stats:" + app + ":node:" + node
}

// AppsIndex is the hash app -> JSON config read by gateways (no hash tag).
func AppsIndex() string { return rlPrefix + "apps" }

// AppIDs is the sorted set of the app ids of AppsIndex, every score 0 (no hash tag): the
// control plane pages and prefix-searches it by lex range instead of reading every app.
func AppIDs() string { return rlPrefix + "apps:ids" }

// AppsBy is the sorted set of the ids of the apps whose field (cluster, priority or enabled) has
// value, members and scores as in AppIDs (no hash tag): the control plane pages a filter by it.
func AppsBy(field, value string) string { return rlPrefix + "apps:by:" + field + ":" + value }

// ClustersIndex is the set of cluster ids (no hash tag).
func ClustersIndex() string { return rlPrefix + "clusters" }

// ConfigVersion is the integer bumped on every config change (no hash tag).
func ConfigVersion() string { return rlPrefix + "config:version" }

// ConfigEpoch is the config store's epoch: a random id written once with the first config (no
// hash tag). Gateways and control planes remember it; a store without it, or with another, is
// not the store they knew (docs/durability.md).
func ConfigEpoch() string { return rlPrefix + "config:epoch" }

// ConfigChanges is the change log: a sorted set scored by config version whose members are
// "<version> <kind> <id>", one or more per version (kinds: internal/store/changes.go; all: a
// gateway reloads everything). Gateways read it from the version they hold (no hash tag).
func ConfigChanges() string { return rlPrefix + "config:changes" }

// ConfigChannel is the pub/sub channel announcing a new config version.
func ConfigChannel() string { return rlPrefix + "config:update" }

// EmergencyChannel is the pub/sub channel announcing emergency activation and deactivation.
func EmergencyChannel() string { return rlPrefix + "emergency" }

// LeaderLock is the lock held by the control-plane replica that runs the periodic jobs.
func LeaderLock() string { return rlPrefix + "controlplane:leader" }

// RulesIndex is the hash rule id -> rule JSON read by gateways (no hash tag).
func RulesIndex() string { return rlPrefix + "rules" }

// RuleStats is the hash of cumulative rule counters "<rule_id>:hits", ":blocked", ":throttled",
// ":shadowed", ":fail_open", incremented by the gateways (no hash tag).
func RuleStats() string { return rlPrefix + "rules:stats" }

// RuleCounter is the prefix of a global rule's state keys; the hash tag {<rule_id>} keeps all
// of a rule's keys in one slot. Callers append their own suffix.
func RuleCounter(rule string) string { return rlPrefix + "rule:" + tag(rule) + ":" }

// BreakersIndex is the hash breaker name -> JSON config read by gateways (no hash tag).
func BreakersIndex() string { return rlPrefix + "breakers" }

// EventsStream is the stream of sampled gateway events (no hash tag).
func EventsStream() string { return rlPrefix + "events" }

// Gateways is the registry of gateway nodes (no hash tag).
func Gateways() string { return rlPrefix + "gateways" }

// ReservedAppID reports whether s is an app id the gateway keeps for its own labels (_s3,
// _unverified, _invalid, _unknown, _unconfigured: every id beginning with "_"); the config
// contract refuses such an app (reserved_id).
func ReservedAppID(s string) bool { return len(s) > 0 && s[0] == '_' }

// ValidID reports whether s matches ^[A-Za-z0-9_-]{1,128}$, the only ids that may reach a key,
// a log line or a metric label.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return false
		}
	}
	return true
}

func idByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	default:
		return c == '_' || c == '-'
	}
}

// AccessKeys is the hash S3 access key id -> app id the gateways identify requests by (no hash
// tag): a key belongs to at most one app.
func AccessKeys() string { return rlPrefix + "access_keys" }

// AppAccessKeys is the set of an app's access key ids (no hash tag), the listing of one app's
// keys without a scan of AccessKeys.
func AppAccessKeys(app string) string { return rlPrefix + "app_access_keys:" + app }

// AccessKeySecrets is the hash S3 access key id -> its secret sealed with the secrets key
// (internal/secrets; never the plain secret), for the keys whose signatures the gateways verify
// (no hash tag).
func AccessKeySecrets() string { return rlPrefix + "access_key_secrets" }

// Buckets is the hash bucket name -> app id that anonymous requests to a bucket are charged to
// (no hash tag).
func Buckets() string { return rlPrefix + "buckets" }
