// Every shape the admin API sends or receives, in one place: when the API changes a payload,
// this file (and the envelope handling in http.ts) is what changes. Field names are the API's
// snake_case; models derived for the UI live next to the code that derives them.

// ---- envelope -------------------------------------------------------------------------------

/**
 * Every /api/v1 answer (controlplane/internal/api/errors.go): `data` (and `meta` for lists) on
 * success, `error` on failure, and the request id.
 */
export interface Envelope<T> {
  data: T
  meta?: ListMeta
  request_id?: string
}

export interface ListMeta {
  total?: number
  page?: number
  limit?: number
  count?: number
  next_cursor?: string
}

/** One broken validation rule (controlplane/internal/validate.Violation). */
export interface Violation {
  /** e.g. "apps[demo-p1].burst_quota", "cluster.capacity", or a plain field name */
  field: string
  /** e.g. "burst_below_guaranteed" */
  code: string
  /** for people */
  message: string
}

/** An error answer: `{"error": {"code", "message", "details"}, "request_id"}`. */
export interface ErrorBody {
  error: string | { code: string; message?: string; details?: unknown }
  message?: string
  details?: unknown
  request_id?: string
}

// ---- auth and users -------------------------------------------------------------------------

export type Role = 'viewer' | 'operator' | 'admin'
export const ROLES: readonly Role[] = ['viewer', 'operator', 'admin']

export interface LoginRequest {
  username: string
  password: string
}

/** Answer of login and refresh: a short access token and the next (rotated) refresh token. */
export interface TokenResponse {
  access_token: string
  refresh_token: string
  token_type?: string
  /** seconds until the access token expires */
  expires_in?: number
  /** Unix seconds at which the access token expires */
  expires_at?: number
  /** Unix seconds at which the session (every refresh) ends */
  refresh_expires_at?: number
  user?: User
}

/** The claims of an access token the console reads (never trusts: the API checks them). */
export interface AccessClaims {
  sub: string
  role: Role
  exp: number
  iat?: number
}

export interface User {
  username: string
  role: Role
  disabled: boolean
  /** Unix seconds */
  created_at: number
  updated_at: number
}

export interface UserCreate {
  username: string
  password: string
  role: Role
}

export interface UserPatch {
  role?: Role
  password?: string
  disabled?: boolean
}

// ---- apps (L2) --------------------------------------------------------------------------------

export type Priority = 0 | 1 | 2 | 3

/** An application as the API shows it: internal/store.App plus its connection limits. */
export interface App {
  app_id: string
  cluster_id: string
  guaranteed_quota: number
  burst_quota: number
  priority: Priority
  c_bw: number
  max_borrow: number
  enabled: boolean
  /** absent: the cluster's limit applies */
  max_connections?: number
  burst_connections?: number
}

/** A create or update (changes.AppFields): absent fields keep their value on update. */
export type AppInput = Partial<App>

export interface AppListQuery {
  page: number
  limit: number
  search?: string
  cluster_id?: string
}

export interface Page<T> {
  items: T[]
  total: number
  page: number
  limit: number
}

/** One field a change would set (validate.DiffEntry); `old` is absent for new objects. */
export interface DiffEntry {
  path: string
  old?: unknown
  new: unknown
}

/** The validator's answer (validate.Result). */
export interface ValidationResult {
  valid: boolean
  dry_run: boolean
  violations: Violation[]
  diff: DiffEntry[]
}

/**
 * The answer to a change (api changeResponse): a dry run is always a 200 with its validation,
 * valid or not; a write adds the new config version and the resource as it now is.
 */
export interface ChangeResult<R = unknown> {
  validation: ValidationResult
  written: boolean
  config_version?: number
  resource?: R
}

// ---- clusters (L1) ----------------------------------------------------------------------------

export interface ClusterConnLimits {
  max_connections: number
  reserved_ratio: number
}

export interface Cluster {
  id: string
  /** tokens/s */
  capacity: number
  reserved_ratio: number
  /** sum of the guaranteed quotas of its apps */
  allocated: number
  /** tokens in the L1 bucket now */
  available: number
  borrowed: number
  emergency_mode: boolean
  /** Unix seconds */
  emergency_until?: number
  emergency_reason?: string
  reconcile_corrections: number
  connections?: ClusterConnLimits
}

export interface ClusterInput {
  capacity?: number
  reserved_ratio?: number
}

// ---- connection limits --------------------------------------------------------------------------

export interface AppConnLimits {
  max_connections: number
  burst_connections: number
}

/** GET /connections: every app with its own limits (null: the cluster's applies) and the usage. */
export interface ConnectionLimits {
  apps: { app_id: string; cluster_id: string; limits: AppConnLimits | null }[]
  usage: ConnectionUsage
}

export interface AppConnLimitInput {
  max_connections: number
  burst_connections?: number
}

export interface ClusterConnLimitInput {
  max_connections: number
  reserved_ratio?: number
}

// ---- emergency ----------------------------------------------------------------------------------

export interface ClusterEmergency {
  cluster_id: string
  active: boolean
  /** Unix seconds */
  until?: number
  reason?: string
}

export interface EmergencyStatus {
  emergency_mode: boolean
  clusters: ClusterEmergency[]
}

export interface EmergencyActivate {
  reason: string
  /** seconds, 1 to 86400 (default 300) */
  duration: number
  /** absent: every cluster */
  cluster_id?: string
}

export interface EmergencyResult {
  message: string
  clusters: { cluster_id: string; active: boolean; until?: number; changed: boolean }[]
}

export interface EmergencyEvent {
  cluster_id: string
  id: string
  event: 'activate' | 'deactivate' | 'expire' | string
  reason: string
  /** manual, auto, … */
  source: string
  actor: string
  /** Unix seconds */
  at: number
  until: number
}

// ---- metrics (live.Dashboard) ----------------------------------

export type TimeRange = '1h' | '6h' | '24h' | '7d'
export const TIME_RANGES: readonly TimeRange[] = ['1h', '6h', '24h', '7d']

export type Health = 'normal' | 'warning' | 'critical'

/** one point of a time series of the dashboard (live.TimePoint) */
export interface TimePoint {
  /** Unix seconds */
  timestamp: number
  value: number
}

/** [Unix seconds, value], what the charts draw */
export type Point = [number, number]

export interface TopApp {
  app_id: string
  requests_1h: number
  cost_1h: number
  /** body bytes through the gateways in the last hour (in: uploads, out: downloads) */
  bytes_in_1h: number
  bytes_out_1h: number
  /** bytes/s now */
  bytes_in_rate: number
  bytes_out_rate: number
  connections: number
  status: Health
}

export interface Alert {
  id: string
  kind?: string
  resource?: string
  severity: 'info' | 'warning' | 'critical'
  message: string
  /** Unix seconds */
  timestamp: number
  acknowledged: boolean
  acknowledged_by?: string
  active?: boolean
  resolved_at?: number
}

export interface RedisHealth {
  status: 'healthy' | 'degraded' | 'down'
  /** ms, the control plane's PING */
  latency_p99: number
  /** ms, the worst a fresh gateway reports */
  node_latency_max_ms?: number
  connection_pool_usage: number
}

/** L1 state of a cluster in the live view (live.ClusterState). */
export interface ClusterState {
  cluster_id: string
  capacity: number
  reserved_ratio: number
  allocated: number
  available: number
  borrowed: number
  emergency_mode: boolean
  emergency_until?: number
  emergency_reason?: string
  reconcile_corrections: number
  /** absent or 0: the gateway default */
  max_connections?: number
  connections_active: number
  connections_peak: number
  connections_rejected: number
  /** requests/s and cost/s now */
  request_rate: number
  cost_rate: number
  /** bytes/s through the gateways now, summed over the cluster's apps (in: uploads, out: downloads) */
  bytes_in_rate: number
  bytes_out_rate: number
}

/** A gateway node (live.Node); null fields: the node does not report them. */
export interface GatewayNode {
  node_id: string
  /** Unix seconds */
  last_seen: number
  config_version: number
  mode?: string
  degradation_level: number | null
  redis_latency_ms: number | null
  l3_hit_ratio: number | null
  stale: boolean
  config_current: boolean
}

export interface DashboardData {
  overview: {
    total_apps: number
    /** enabled, with requests in the last hour */
    active_apps: number
    total_requests_1h: number
    total_cost_1h: number
    /** body bytes through the gateways in the last hour */
    total_bytes_in_1h: number
    total_bytes_out_1h: number
    /** 0..1 */
    l1_available_ratio: number
    emergency_mode: boolean
  }
  metrics: {
    /** requests/s and cost/s over the dashboard's range */
    request_rate: TimePoint[]
    cost_rate: TimePoint[]
    /** bytes/s over the dashboard's range, all apps */
    bytes_in_rate: TimePoint[]
    bytes_out_rate: TimePoint[]
    cost_distribution: { buckets: { le: string; count: number }[] }
    token_availability: {
      /** L1 available / capacity, 0..1 */
      l1: number
      /** mean L2 tokens / burst of the enabled apps, 0..1 */
      l2_avg: number
      /** mean L3 hit ratio of fresh gateways, 0..1; null when none reports it */
      l3_cache_hit: number | null
    }
    connection_stats: {
      active: number
      peak: number
      rejected_1h: number
      /** null: counted per node only (gateway metric) */
      leaked_1h: number | null
    }
  }
  top_apps: TopApp[]
  alerts: Alert[]
  redis_health: RedisHealth
  clusters: ClusterState[]
  nodes: GatewayNode[]
  range: TimeRange
  config_version: number
  /** Unix seconds of this snapshot */
  timestamp: number
}

/** One app in the live view (live.AppState). */
export interface AppState {
  app_id: string
  cluster_id: string
  priority: number
  enabled: boolean
  burst_quota: number
  guaranteed_quota: number
  l2_tokens: number
  borrowed: number
  debt: number
  /** tokens leased to gateways and not yet used */
  l3_tokens: number
  requests_total: number
  cost_total: number
  request_rate: number
  cost_rate: number
  /** bytes/s through the gateways now (in: uploads, out: downloads) */
  bytes_in_rate: number
  bytes_out_rate: number
  reconcile_corrections: number
  drift_ppm: number
  active_nodes: number
  connections_active: number
  connections_peak: number
  connections_rejected: number
}

/** GET /metrics/apps/:id (live.AppDetail) */
export interface AppMetrics {
  app: AppState
  requests_1h: number
  cost_1h: number
  connections_rejected_1h: number
  bytes_in_1h: number
  bytes_out_1h: number
  request_rate: TimePoint[] | null
  cost_rate: TimePoint[] | null
  /** bytes/s over the range (null: no traffic in the control plane's history) */
  bytes_in_rate: TimePoint[] | null
  bytes_out_rate: TimePoint[] | null
  range: TimeRange
  timestamp: number
}

/** GET /metrics/connections (live.ConnectionsView) */
export interface ConnectionUsage {
  apps: { app_id: string; cluster_id: string; active: number; peak: number; rejected: number }[]
  clusters: ClusterState[]
  timestamp: number
}

/** A range query the control plane proxied to Prometheus. */
export interface MetricsHistory {
  range: TimeRange
  /** seconds between points */
  step: number
  series: { name: string; labels?: Record<string, string>; points: Point[] }[]
}

/** Names of the history series the console asks Prometheus for. */
export type HistorySeries = 'request_rate' | 'cost_rate' | 'rejected_rate' | 'bytes_in_rate' | 'bytes_out_rate'

// ---- audit --------------------------------------------------------------------------------------

export interface AuditEntry {
  id: string
  /** Unix milliseconds */
  ts: number
  actor: string
  role?: string
  ip?: string
  action: string
  resource?: string
  method?: string
  route?: string
  status?: number
  outcome: 'ok' | 'rejected' | 'denied' | 'failed' | string
  request_id?: string
  details?: unknown
}

export interface AuditQuery {
  /** authenticated (default) or anonymous: requests refused before authentication */
  stream?: 'authenticated' | 'anonymous'
  actor?: string
  action?: string
  resource?: string
  outcome?: string
  /** Unix ms */
  since?: number
  until?: number
  limit?: number
  cursor?: string
}

export interface AuditPage {
  entries: AuditEntry[]
  next_cursor?: string
}

// ---- WebSocket ----------------------------------------------------------------------------------

/** The emergency channel's notice (redis-scripts/emergency_activate.lua). */
export interface EmergencyNotice {
  cluster_id: string
  active: boolean
  until: number
  reason?: string
}

export type RealtimeUpdate =
  | { type: 'metrics'; data: DashboardData; timestamp: number }
  | { type: 'alert'; data: Alert; timestamp: number }
  | { type: 'config_change'; data: { config_version: number }; timestamp: number }
  | { type: 'emergency'; data: EmergencyNotice; timestamp: number }

// ---- rules (docs/rules-contract.md §2, §8) ---------------------------------------------------------

export type RuleScope = 'global' | 'app' | 'user' | 'ip' | 'endpoint'
export const RULE_SCOPES: readonly RuleScope[] = ['global', 'app', 'user', 'ip', 'endpoint']
export type RuleAlgorithm = 'token_bucket' | 'sliding_window' | 'fixed_window'
export const RULE_ALGORITHMS: readonly RuleAlgorithm[] = ['token_bucket', 'sliding_window', 'fixed_window']
export type RuleUnit = 'requests' | 'cost'
export const RULE_UNITS: readonly RuleUnit[] = ['requests', 'cost']
export type RuleDistribution = 'node' | 'global'
export const RULE_DISTRIBUTIONS: readonly RuleDistribution[] = ['node', 'global']
export type RuleAction = 'reject' | 'throttle' | 'shadow'
export const RULE_ACTIONS: readonly RuleAction[] = ['reject', 'throttle', 'shadow']

/** Which requests a rule applies to: every present field must match; absent = any. */
export interface RuleMatch {
  app_ids?: string[]
  methods?: string[]
  /** exact first path segment */
  bucket?: string
  /** object key (path after the bucket) prefix */
  key_prefix?: string
  /** glob on the URI: * = a run of non-'/' chars, ** = anything */
  path?: string
  cidrs?: string[]
  headers?: Record<string, string>
}

/** A rule as written (POST / PUT body): the server sets created_at, updated_at, updated_by. */
export interface RuleInput {
  id: string
  description?: string
  scope: RuleScope
  /** scope user only: "header:<Name>" or "s3_access_key" */
  user_key?: string
  match?: RuleMatch
  algorithm: RuleAlgorithm
  limit: number
  window_seconds: number
  /** token bucket capacity (default = limit); windows: absent */
  burst?: number
  unit: RuleUnit
  distribution: RuleDistribution
  /** lower is checked first; ties by id */
  priority: number
  enabled: boolean
  /** RFC 3339 */
  effective_from?: string | null
  effective_to?: string | null
  action: RuleAction
  /** throttle only, 1 … 5000 */
  throttle_max_delay_ms?: number
}

/** Cumulative per-rule counters (ratelimit:rules:stats). */
export interface RuleStats {
  hits: number
  blocked: number
  throttled: number
  shadowed: number
  fail_open: number
}

export interface Rule extends RuleInput {
  /** Unix seconds */
  created_at?: number
  updated_at?: number
  updated_by?: string
  stats?: RuleStats
}

// ---- circuit breakers (docs/rules-contract.md §3, §6, §8) ---------------------------------------

export type BreakerState = 'closed' | 'half_open' | 'open'

export interface BreakerConfig {
  /** the backend: the value of $tollgate_backend */
  name: string
  enabled: boolean
  /** true: one breaker per (backend, app) */
  per_app: boolean
  window_ms: number
  min_requests: number
  failure_threshold: number
  failure_ratio: number
  open_timeout_ms: number
  success_threshold: number
  half_open_max_inflight: number
  failure_statuses: number[]
}

/** A breaker's state on one gateway node (from its report). */
export interface BreakerNodeState {
  node_id: string
  /** "<name>" or "<name>/<app>" */
  key: string
  state: BreakerState
  failures: number
  requests: number
  /** Unix seconds (0 or absent: never) */
  opened_at?: number
  retry_at?: number
}

export interface Breaker extends BreakerConfig {
  nodes?: BreakerNodeState[]
}

// ---- events (docs/rules-contract.md §5) ---------------------------------------------------------

export type EventType = 'request_blocked' | 'rule_triggered' | 'threshold_exceeded' | 'circuit_opened' |
  'circuit_closed'
export const EVENT_TYPES: readonly EventType[] = ['request_blocked', 'rule_triggered', 'threshold_exceeded',
  'circuit_opened', 'circuit_closed']

/** One sampled event of ratelimit:events; fields are absent when unknown. */
export interface TollgateEvent {
  /** the stream id */
  id: string
  event_type: EventType | string
  severity?: 'info' | 'warning' | 'error' | 'critical' | string
  app_id?: string
  user_id?: string
  ip_address?: string
  user_agent?: string
  endpoint?: string
  http_method?: string
  request_id?: string
  rule_id?: string
  rule_type?: string
  limit_value?: number | string
  current_usage?: number | string
  action_taken?: string
  response_code?: number | string
  response_time_ms?: number | string
  node_id?: string
  reason?: string
  /** how many occurrences this entry stands for */
  sampled?: number | string
  /** Unix ms */
  created_at?: number | string
}

export interface EventQuery {
  event_type?: string
  app_id?: string
  rule_id?: string
  /** Unix ms */
  since?: number
  until?: number
  /** 1 … 1000 (default 100) */
  limit?: number
  /** stream id to continue before */
  cursor?: string
}

export interface EventPage {
  events: TollgateEvent[]
  next_cursor?: string
}
