// Package internal holds no code: it documents the control plane's own packages, the ones only
// the tollgate-controlplane binary (controlplane/cmd/) uses. What other programs share with it —
// the Redis keys, scripts, ledger, config store, seed and the test fixtures — is in the
// module's top-level internal/ (see its doc.go).
//
//   - config: the control plane's settings from the environment (one struct, all errors at once).
//   - admin: assembles the admin API over one Redis.
//   - api: the HTTP interface (routes, envelope, errors, JWT, roles, rate limits, audit).
//   - auth, users, audit: passwords, tokens and sessions; accounts; the audit stream.
//   - changes, validate, rules: the write path, the token-economy validator, and the rules and
//     circuit breakers of docs/rules-contract.md.
//   - openapi, webui: the OpenAPI document and the embedded console.
//   - live, metrics, streampage: the cluster view, the Prometheus endpoint, stream paging.
//   - redisconn, clock: waiting for Redis at start-up; the time seam of the jobs.
//   - jobs: the leader-only runner of the periodic jobs, with each job in a package below it:
//     jobs/leader (the election), jobs/debt, jobs/emergency, jobs/overload, jobs/reconcile and
//     jobs/usage (the usage measurement that emergency and overload share).
package internal
