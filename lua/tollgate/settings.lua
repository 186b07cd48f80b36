-- The gateway's settings: one schema entry per setting (its init() option, its TOLLGATE_*
-- variable, type, default, bounds and meaning). load() reads every setting — the init() option
-- over the environment over the default — and reports every bad one at once. docs/settings.md
-- and nginx/tollgate_env.conf are generated from this table (make settings-doc); a Go test
-- (controlplane/internal/config) fails when they are not current.
--
-- Adding a setting is one entry below. Kinds: string, number, integer, enum (values), bool
-- (on/off), cidrs (comma-separated CIDRs), id ([A-Za-z0-9_-]{1,128}), table (init() option only).
-- Bounds: min/max inclusive, above exclusive. An entry without env is an init() option only.
-- Pure Lua: no ngx, so busted and the doc generator load it.
local tonumber = tonumber
local tostring = tostring
local type = type
local floor = math.floor
local find = string.find
local concat = table.concat

local _M = {}

local function hostname_id()
    local f = io.open("/proc/sys/kernel/hostname", "r")
    local h = f and f:read("*l") or "node"
    if f then
        f:close()
    end
    return "gw-" .. h:gsub("[^%w_%-]", "-"):sub(1, 100)
end

-- Settings whose value is a small language of its own are parsed here too (entry.parse: the
-- value, or nil and why), so that a start names every bad setting, not one per restart.
local function items(v)
    local out = {}
    for item in v:gmatch("[^,]+") do
        item = item:match("^%s*(.-)%s*$")
        if item ~= "" then
            out[#out + 1] = item
        end
    end
    return out
end

local function app_sources(v)
    local seen, list = {}, items(v)
    for _, name in ipairs(list) do
        if name ~= "s3_access_key" and name ~= "header" and not name:match("^var:[%w_]+$") then
            return nil, "names an unknown source '" .. name
                .. "' (s3_access_key, header, var:<nginx variable>)"
        end
        if seen[name] then
            return nil, "lists source '" .. name .. "' twice"
        end
        seen[name] = true
    end
    if #list == 0 then
        return nil, "must name at least one source"
    end
    return v
end

local function s3_domains(v)
    for _, d in ipairs(items(v)) do
        d = d:lower()
        if not d:match("^[%w][%w%.%-]*$") or find(d, "..", 1, true) then
            return nil, "has a bad domain '" .. d .. "'"
        end
    end
    return v
end

-- base costs: a list (TOLLGATE_COSTS) or the costs option's table, names checked by tollgate.cost
local function cost_table(t)
    local cost = require("tollgate.cost")
    local ok, err = cost.new({ base = t })
    if not ok then
        return nil, "is refused: " .. err
    end
    return t
end

local function cost_list(v)
    local t, err = require("tollgate.cost").parse_list(v)
    if not t then
        return nil, "is refused: " .. err
    end
    local ok, cerr = cost_table(t)
    if not ok then
        return nil, cerr
    end
    return v
end

local function redis_url(v)
    local u, err = require("tollgate.redis.url").parse(v)
    if not u then
        return nil, "is refused: " .. err
    end
    return v
end

-- luacheck: push ignore 631 (one line per setting)
_M.SCHEMA = {
    { key = "redis_url", env = "TOLLGATE_REDIS_URL", kind = "string", parse = redis_url, secret = true, default = "redis://127.0.0.1:6390/0", doc = "Redis of the L1/L2 state and the config: `redis://[:password@]host:port[/db]`, `rediss://`, `redis-sentinel://`, `redis-cluster://`" },
    { key = "node_id", env = "TOLLGATE_NODE_ID", kind = "id", default = hostname_id, doc_default = "`gw-<hostname>`", doc = "this node's id, unique per node; names its leases and its report" },
    { key = "scripts_dir", env = "TOLLGATE_SCRIPTS_DIR", kind = "string", doc_default = "`redis-scripts/` next to `lua/`", doc = "directory of the Redis scripts the gateway loads (the files the control plane loads)" },
    { key = "mode", env = "TOLLGATE_LIMITER_MODE", kind = "enum", values = { "lease", "remote" }, default = "lease", doc = "`remote` calls Redis for every request (the benchmarks' baseline only)" },
    { key = "app_header", env = "TOLLGATE_APP_HEADER", kind = "string", default = "X-App-Id", doc = "request header that names the app" },
    { key = "op_timeout_ms", env = "TOLLGATE_REDIS_TIMEOUT_MS", kind = "number", default = 100, above = 0, max = 100, doc = "timeout (connect, send, read) of every Redis call a request waits on, in ms" },
    { key = "bg_timeout_ms", env = "TOLLGATE_REDIS_BG_TIMEOUT_MS", kind = "number", default = 1000, above = 0, max = 60000, doc = "timeout of the Redis calls no request waits on (reports, refills, config polls, events, statistics), in ms" },
    { key = "sync_interval", env = "TOLLGATE_SYNC_INTERVAL", kind = "number", default = 0.1, above = 0, max = 3600, doc = "seconds between consumption reports" },
    { key = "batch_threshold", env = "TOLLGATE_BATCH_THRESHOLD", kind = "number", default = 1000, min = 1, doc = "pending requests that trigger an early report" },
    { key = "min_target", env = "TOLLGATE_RESERVE_TARGET", kind = "number", default = 1000, min = 1, doc = "smallest reserve target of a lease (tokens) while L2 is not scarce" },
    { key = "max_target", env = "TOLLGATE_MAX_TARGET", kind = "number", default = 200000, min = 1, doc = "largest adaptive reserve target of a lease (tokens)" },
    { key = "target_horizon", env = "TOLLGATE_TARGET_HORIZON", kind = "number", default = 0.5, above = 0, max = 60, doc = "seconds of the node's traffic a lease aims to hold" },
    { key = "refill_threshold", kind = "number", default = 0.2, above = 0, max = 1, doc = "share of the target below which a lease asks L2 for more" },
    { key = "idle_return_after", env = "TOLLGATE_IDLE_RETURN", kind = "number", default = 1.0, above = 0, doc = "seconds without traffic after which a node returns its lease to L2" },
    { key = "fail_open_rate", env = "TOLLGATE_FAIL_OPEN_RATE", kind = "number", default = 100, min = 0, doc = "tokens per second per app and node admitted while Redis is unreachable" },
    { key = "lookup_rate", env = "TOLLGATE_LOOKUP_RATE", kind = "number", default = 1000, min = 0, doc = "on-demand Redis lookups per second and node of apps, access keys and buckets a full `config_dict` does not hold; beyond it such an id is refused 503 (retry in 1 s) without a Redis call" },
    { key = "lookup_negative_ttl", env = "TOLLGATE_LOOKUP_NEGATIVE_TTL", kind = "number", default = 5, above = 0, max = 300, doc = "seconds an id Redis does not know is remembered as unknown by a node whose `config_dict` is full (shared dict `tollgate_lookup`, bounded by its size)" },
    { key = "neg_cache_min", kind = "number", default = 0.05, above = 0, doc = "shortest time (s) an unknown app id is remembered as unknown" },
    { key = "neg_cache_max", kind = "number", default = 1.0, above = 0, doc = "longest time (s) an unknown app id is remembered as unknown" },
    { key = "breaker_retry", env = "TOLLGATE_BREAKER_RETRY", kind = "number", default = 0.5, above = 0, max = 60, doc = "seconds before an open Redis breaker lets each worker probe Redis" },
    { key = "degradation_hold", env = "TOLLGATE_DEGRADATION_HOLD", kind = "number", default = 2, min = 0, max = 3600, doc = "seconds a lower degradation level must hold before the node steps down to it" },
    { key = "config_poll", env = "TOLLGATE_CONFIG_POLL", kind = "number", default = 1.0, above = 0, max = 60, doc = "seconds between config version polls (pub/sub notices apply at once)" },
    { key = "report_interval", env = "TOLLGATE_REPORT_INTERVAL", kind = "number", default = 5, min = 0.1, max = 15, doc = "seconds between this node's reports in `ratelimit:gateways` (made at a config poll; the control plane calls a node stale after 30 s without one)" },
    { key = "pool_size", kind = "integer", default = 50, min = 1, max = 10000, doc = "Redis connections kept per worker" },
    { key = "costs", kind = "table", parse = cost_table, doc_default = "the built-in tier costs", doc = "tier costs (`tollgate.cost`), checked at start" },
    { key = "chunked_estimate", env = "TOLLGATE_CHUNKED_ESTIMATE", kind = "integer", default = 1048576, min = 0, doc = "bytes a chunked upload without `x-amz-decoded-content-length` pays up front" },
    { key = "reservation_timeout", env = "TOLLGATE_RESERVATION_TIMEOUT", kind = "number", default = 3600, above = 0, doc = "seconds after which an uncompleted multipart reservation is released" },
    { key = "pacing", env = "TOLLGATE_PACING", kind = "bool", default = "on", doc = "`on` charges a download's bandwidth as its bytes leave and slows (never cuts) the downloads of an app whose lease cannot pay, to the app's share of the node (docs/operations.md \"Bandwidth pacing\"); `off` charges the bandwidth after the response, unpaced" },
    { key = "response_headers", env = "TOLLGATE_RESPONSE_HEADERS", kind = "enum", values = { "compact", "full" }, default = "compact", doc = "the limiter's headers on admitted answers: `compact` sends `X-RateLimit-Cost` and `X-RateLimit-Remaining` (the connection counts only on the connection limiter's refusals, which they explain); `full` adds `X-Connection-Limit`, `X-Connection-Current` and `X-Connection-Remaining` to every admitted answer (docs/operations.md \"Response headers\")" },
    { key = "jit_tune", env = "TOLLGATE_JIT_TUNE", kind = "bool", default = "on", doc = "`on` raises LuaJIT's trace limits (VM-wide, in `init_by_lua`) so that the request path compiles, and keeps the timers' code in the interpreter so that it compiles the same way every time (docs/development.md \"Reading the JIT log\"); `off` keeps the VM's defaults" },
    { key = "jit_log", env = "TOLLGATE_JIT_LOG", kind = "string", default = "", doc = "diagnosis only: each worker writes LuaJIT's trace log (`jit.v`: every trace compiled, every abort and its reason) to `<value>.<pid>`, a path the workers' user can create; empty: no log (docs/development.md)" },
    { key = "events_per_sec", env = "TOLLGATE_EVENTS_PER_SEC", kind = "integer", default = 20, min = 0, max = 100000, doc = "event entries per second this node writes to `ratelimit:events` (0: none); the rest are folded into the next entry's `sampled`" },
    { key = "trusted_proxies", env = "TOLLGATE_TRUSTED_PROXIES", kind = "cidrs", default = "", doc = "comma-separated CIDRs of proxies whose `X-Forwarded-For` is believed for the client IP of rules" },
    { key = "app_sources", env = "TOLLGATE_APP_SOURCES", kind = "string", parse = app_sources, default = "s3_access_key,header", doc = "identity sources in order: `s3_access_key` (the app of the request's S3 access key id), `header` (the app header), `var:<name>` (an nginx variable); see docs/s3.md" },
    { key = "app_header_from", env = "TOLLGATE_APP_HEADER_FROM", kind = "enum", values = { "any", "trusted" }, default = "any", doc = "`trusted`: the app header counts only on connections from `TOLLGATE_TRUSTED_PROXIES`" },
    { key = "default_app", env = "TOLLGATE_DEFAULT_APP", kind = "id", doc = "app charged for S3 access key ids the gateway does not know (unset: `403 InvalidAccessKeyId`)" },
    { key = "s3_domains", env = "TOLLGATE_S3_DOMAINS", kind = "string", parse = s3_domains, default = "", doc = "comma-separated domains of virtual-hosted S3 addressing (`<bucket>.<domain>`)" },
    { key = "error_format", env = "TOLLGATE_ERROR_FORMAT", kind = "enum", values = { "auto", "s3" }, default = "auto", doc = "`auto`: refusals in JSON for requests that name their app by the app header or a `var:` source, in S3's XML dialect for all others (S3 credentials, anonymous); `s3`: S3's dialect for all" },
    { key = "s3_throttle_status", env = "TOLLGATE_S3_THROTTLE_STATUS", kind = "enum", values = { "503", "429" }, default = "503", doc = "HTTP status of S3 `SlowDown` refusals" },
    { key = "max_body_size", env = "TOLLGATE_MAX_BODY_SIZE", kind = "integer", default = 5368709120, min = 0, doc = "largest request body (bytes) a request may announce; a larger one is refused before its body with `413` (`EntityTooLarge` in S3's dialect)" },
    { key = "cost_list", env = "TOLLGATE_COSTS", kind = "string", parse = cost_list, default = "", doc = "base costs of S3 operations or their classes, e.g. `ListObjectsV2=4,PUT=6` (docs/s3.md); the `costs` option replaces it" },
    { key = "conn_app_limit", env = "TOLLGATE_CONN_APP_LIMIT", kind = "integer", default = 1000, min = 1, doc = "requests in flight per app and node when Redis has no `connlimit:{c}:config:<app>`" },
    { key = "conn_cluster_limit", env = "TOLLGATE_CONN_CLUSTER_LIMIT", kind = "integer", default = 5000, min = 1, doc = "requests in flight per cluster and node when Redis has no `connlimit:{c}:cluster`" },
    { key = "conn_timeout", env = "TOLLGATE_CONN_TIMEOUT", kind = "number", default = 300, min = 0.1, doc = "seconds without a heartbeat after which an in-flight slot counts as leaked" },
    { key = "conn_cleanup_interval", env = "TOLLGATE_CONN_CLEANUP_INTERVAL", kind = "number", default = 30, min = 0.1, doc = "seconds between leak cleanup runs" },
    { key = "conn_cleanup_batch", env = "TOLLGATE_CONN_CLEANUP_BATCH", kind = "integer", default = 10000, min = 1, doc = "tracking slots one cleanup run looks at, at most" },
    { key = "conn_stats_interval", env = "TOLLGATE_CONN_STATS_INTERVAL", kind = "number", default = 10, min = 0.1, doc = "seconds between connection statistics written to Redis" },
    { key = "secrets_key_file", env = "TOLLGATE_SECRETS_KEY_FILE", kind = "string", default = "", doc = "key file (the control plane's, 0600, read by the master at start) that opens the access key secrets the control plane sealed: the gateway then verifies the signatures of those keys (docs/security.md); unset: keys with a secret on file are refused" },
    { key = "conn_config_ttl", env = "TOLLGATE_CONN_CONFIG_TTL", kind = "number", default = 60, min = 0.1, doc = "seconds the connection limits of the apps with traffic on the node are cached (a config notice refreshes them at once)" },
    { key = "body_min_rate", env = "TOLLGATE_BODY_MIN_RATE", kind = "number", default = 8192, min = 0, doc = "bytes per second an upload's body must average: an upload (PutObject, UploadPart, PostObject, PATCH) must be done within `TOLLGATE_BODY_GRACE` plus its announced length (Content-Length, `x-amz-decoded-content-length`, else `TOLLGATE_CHUNKED_ESTIMATE`) at this rate, else its connection is ended and its slot freed (0: no deadline)" },
    { key = "body_grace", env = "TOLLGATE_BODY_GRACE", kind = "number", default = 10, above = 0, max = 86400, doc = "seconds an upload has beyond its length at `TOLLGATE_BODY_MIN_RATE` (for the client to start and the backend to answer)" },
    { key = "conn_client_share", env = "TOLLGATE_CONN_CLIENT_SHARE", kind = "number", default = 0.5, above = 0, max = 1, doc = "share of an app's connection slots (`burst_connections`) one client address may hold on a node, at least one slot; 1: no per-address limit. The address is `$remote_addr`, or `X-Forwarded-For` from `TOLLGATE_TRUSTED_PROXIES`: behind a load balancer set those (docs/security.md)" },
    { key = "auth_fail_budget", env = "TOLLGATE_AUTH_FAIL_BUDGET", kind = "integer", default = 50, min = 0, doc = "requests from one client address the backend may refuse as unauthenticated (401/403) within `TOLLGATE_AUTH_FAIL_WINDOW`; beyond it the gateway refuses that address's requests itself (`SlowDown`, reason `auth_failure_budget`) until the window passes (0: no budget)" },
    { key = "auth_fail_key_budget", env = "TOLLGATE_AUTH_FAIL_KEY_BUDGET", kind = "integer", default = 20, min = 0, doc = "the same budget per access key id and client address (0: none)" },
    { key = "auth_fail_window", env = "TOLLGATE_AUTH_FAIL_WINDOW", kind = "number", default = 60, above = 0, max = 86400, doc = "seconds of the auth-failure budget's window, from an address's (or key's) first refused request" },
    { key = "retry_after_max", env = "TOLLGATE_RETRY_AFTER_MAX", kind = "number", default = 60, above = 0, max = 86400, doc = "longest wait (s) a refusal announces in `Retry-After`; the wait is otherwise the time the app's refill needs to afford the refused request (docs/security.md)" },
}
-- luacheck: pop

-- lazily: the CIDR parser needs bit ops of LuaJIT only
local function cidr_list(v)
    return require("tollgate.request.ipmatch").parse_list(v)
end

local function valid_id(v)
    return type(v) == "string" and #v <= 128 and find(v, "^[%w_%-]+$") ~= nil
end

local function bounds(e)
    local lo = e.above and ("> " .. e.above) or (e.min and (">= " .. e.min))
    local hi = e.max and ("<= " .. e.max)
    if lo and hi then
        return lo .. " and " .. hi
    end
    return lo or hi
end

--- The checked value of schema entry e (a setting, or any bounded field shaped like one: the
-- breaker configs use it) from raw — an option's value, or the environment's string when
-- from_string — or nil, message, "type" | "bounds".
local function check(e, raw, from_string)
    local kind = e.kind
    if kind == "number" or kind == "integer" then
        local n = raw
        if type(raw) == "string" and from_string ~= false then
            n = tonumber(raw)
        end
        if type(n) ~= "number" or n ~= n then
            return nil, "must be a number", "type"
        end
        if kind == "integer" and n ~= floor(n) then
            return nil, "must be an integer", "type"
        end
        if (e.min and n < e.min) or (e.above and n <= e.above) or (e.max and n > e.max) then
            return nil, "must be " .. bounds(e), "bounds"
        end
        return n
    elseif kind == "enum" or kind == "bool" then
        local values = e.values or { "on", "off" }
        for _, v in ipairs(values) do
            if raw == v then
                return raw
            end
        end
        return nil, "must be one of " .. concat(values, ", "), "bounds"
    elseif kind == "id" then
        if not valid_id(raw) then
            return nil, "must match ^[A-Za-z0-9_-]{1,128}$", "bounds"
        end
        return raw
    elseif kind == "cidrs" then
        local list, err = cidr_list(raw)
        if not list then
            return nil, "must be comma-separated CIDRs: " .. tostring(err), "bounds"
        end
        return list
    elseif kind == "table" then
        if type(raw) ~= "table" then
            return nil, "must be a table", "type"
        end
        return raw
    end
    if type(raw) ~= "string" then
        return nil, "must be a string", "type"
    end
    return raw
end
_M.check = check

--- Every setting from opts (init() options) over getenv (os.getenv) over the defaults.
-- Returns the settings table, and the list of problems (empty when all are good), one per bad
-- setting: "TOLLGATE_X='v' must be ...".
function _M.load(opts, getenv)
    opts = opts or {}
    getenv = getenv or os.getenv
    local s, errs = {}, {}
    for _, e in ipairs(_M.SCHEMA) do
        local raw, from = opts[e.key], e.key
        if raw == nil and e.env then
            raw, from = getenv(e.env), e.env
            if raw == "" then
                raw = nil
            end
        end
        if raw == nil then
            local d = e.default
            if type(d) == "function" then
                d = d()
            end
            raw, from = d, nil
        end
        if raw ~= nil then
            local v, msg = check(e, raw)
            if v ~= nil and e.parse then
                v, msg = e.parse(v)
            end
            if v == nil then
                local name = from or e.env or e.key
                if from == e.key and e.env then
                    name = e.key .. " (" .. e.env .. ")"
                end
                -- a value that can hold a secret (a password in the URL) is never echoed
                local shown = e.secret and " (value not shown) " or "='" .. tostring(raw) .. "' "
                errs[#errs + 1] = name .. shown .. msg
            end
            s[e.key] = v
        end
    end
    -- settings that only make sense together
    if s.app_header_from == "trusted" and s.trusted_proxies and #s.trusted_proxies == 0 then
        errs[#errs + 1] = "TOLLGATE_APP_HEADER_FROM='trusted' needs TOLLGATE_TRUSTED_PROXIES"
    end
    return s, errs
end

--- load() that stops the start with every problem in one message (error(), as init_by_lua
-- reports it).
function _M.get(opts, getenv)
    local s, errs = _M.load(opts, getenv)
    if #errs > 0 then
        error("tollgate: bad settings: " .. concat(errs, "; "), 0)
    end
    return s
end

--- The documentation rows: {env, key, default, bounds, meaning} per entry, as text.
function _M.rows()
    local out = {}
    for _, e in ipairs(_M.SCHEMA) do
        local d = e.doc_default
        if d == nil then
            d = e.default == nil and "(none)" or e.default == "" and "(empty)"
                or "`" .. tostring(e.default) .. "`"
        end
        local b = bounds(e) or ""
        if e.kind == "integer" then
            b = b == "" and "integer" or "integer " .. b
        elseif e.values or e.kind == "bool" then
            b = concat(e.values or { "on", "off" }, " | ")
        elseif e.kind == "id" then
            b = "`[A-Za-z0-9_-]{1,128}`"
        elseif e.kind == "cidrs" then
            b = "CIDRs, comma-separated"
        end
        out[#out + 1] = { e.env or "", e.key, d, b, e.doc }
    end
    return out
end

return _M
