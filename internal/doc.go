// Package internal holds no code: it documents the split of the repository's Go packages.
//
// The top-level internal/ holds what more than one program of the module uses — the control
// plane, the demo S3 backend, the simulator (sim/), the benchmarks (bench/) and the integration
// tests (t/) — and what defines the shared Redis contract:
//
//   - keys: the Redis key and channel names, fixed by testdata/keys.golden and shared with the
//     Lua gateway;
//   - scripts: loads the Redis scripts of redis-scripts/ and runs them by SHA, as the gateway does;
//   - ledger: the typed Go face of those scripts (grants, reports, refill, reconciliation,
//     emergency, overload, the leader lock) and readers of the L1/L2 hashes;
//   - store: the configuration in Redis (clusters, apps, the config version);
//   - seed: the demo configuration;
//   - testutil: the one test fixture package — real redis-server processes (one server, a
//     Cluster, a Sentinel group), the control plane's Fixture on top of one, a fake Clock, and
//     Eventually.
//
// controlplane/internal/ holds what only the control plane binary uses: its settings (config),
// the admin API (api, auth, users, audit, changes, validate, rules, openapi, webui, admin), the
// cluster view (live, metrics, streampage), the Redis start-up wait (redisconn), the time seam
// (clock) and, under controlplane/internal/jobs/, the periodic jobs: the runner (jobs) and each
// job in its own package (leader, debt, emergency, overload, reconcile, usage).
//
// A package moves from controlplane/internal/ to internal/ when a second program needs it.
package internal
