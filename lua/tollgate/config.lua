-- Settings of the gateway (from init() options or TOLLGATE_* environment variables) and the
-- cache of app configs: Redis `ratelimit:apps` -> config_dict (shared by workers) -> a
-- per-worker table of parsed configs keyed by config version.
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local ipmatch = require("tollgate.ipmatch")
local rules_parse = require("tollgate.rules_parse")
local breaker_config = require("tollgate.breaker_config")
local hashload = require("tollgate.hashload")
local genpage = require("tollgate.genpage")

local getenv = os.getenv
local tonumber = tonumber
local type = type
local floor = math.floor

local _M = {}

local cdict = ngx.shared.config_dict

local function num_env(name, default)
    local v = getenv(name)
    if v == nil or v == "" then
        return default
    end
    local n = tonumber(v)
    if not n then
        error(name .. " must be a number, got '" .. v .. "'", 0)
    end
    return n
end

local function default_node_id()
    local f = io.open("/proc/sys/kernel/hostname", "r")
    local h = f and f:read("*l") or "node"
    if f then
        f:close()
    end
    h = h:gsub("[^%w_%-]", "-"):sub(1, 100)
    return "gw-" .. h
end

--- Build settings from opts (table) over environment over defaults; error() on bad values.
function _M.settings(opts)
    opts = opts or {}
    local s = {
        redis_url = opts.redis_url or getenv("TOLLGATE_REDIS_URL") or "redis://127.0.0.1:6390/0",
        node_id = opts.node_id or getenv("TOLLGATE_NODE_ID") or default_node_id(),
        scripts_dir = opts.scripts_dir or getenv("TOLLGATE_SCRIPTS_DIR"),
        mode = opts.mode or getenv("TOLLGATE_LIMITER_MODE") or "lease",
        app_header = opts.app_header or getenv("TOLLGATE_APP_HEADER") or "X-App-Id",
        op_timeout_ms = opts.op_timeout_ms or num_env("TOLLGATE_REDIS_TIMEOUT_MS", 100),
        bg_timeout_ms = opts.bg_timeout_ms or num_env("TOLLGATE_REDIS_BG_TIMEOUT_MS", 1000),
        sync_interval = opts.sync_interval or num_env("TOLLGATE_SYNC_INTERVAL", 0.1),
        batch_threshold = opts.batch_threshold or num_env("TOLLGATE_BATCH_THRESHOLD", 1000),
        min_target = opts.min_target or num_env("TOLLGATE_RESERVE_TARGET", 1000),
        max_target = opts.max_target or num_env("TOLLGATE_MAX_TARGET", 200000),
        target_horizon = opts.target_horizon or num_env("TOLLGATE_TARGET_HORIZON", 0.5),
        refill_threshold = opts.refill_threshold or 0.2,
        idle_return_after = opts.idle_return_after or num_env("TOLLGATE_IDLE_RETURN", 1.0),
        fail_open_rate = opts.fail_open_rate or num_env("TOLLGATE_FAIL_OPEN_RATE", 100),
        neg_cache_min = opts.neg_cache_min or 0.05,
        neg_cache_max = opts.neg_cache_max or 1.0,
        breaker_retry = opts.breaker_retry or num_env("TOLLGATE_BREAKER_RETRY", 0.5),
        degradation_hold = opts.degradation_hold or num_env("TOLLGATE_DEGRADATION_HOLD", 2),
        config_poll = opts.config_poll or num_env("TOLLGATE_CONFIG_POLL", 1.0),
        report_interval = opts.report_interval or num_env("TOLLGATE_REPORT_INTERVAL", 5),
        pool_size = opts.pool_size or 50,
        costs = opts.costs,
        chunked_estimate = opts.chunked_estimate or num_env("TOLLGATE_CHUNKED_ESTIMATE", 1048576),
        reservation_timeout = opts.reservation_timeout
            or num_env("TOLLGATE_RESERVATION_TIMEOUT", 3600),
        jit_tune = opts.jit_tune or getenv("TOLLGATE_JIT_TUNE") or "on",
        -- off: DESIGN keeps L3 and the connection limiter in shared dicts (tollgate.counters)
        shared_counters = opts.shared_counters or getenv("TOLLGATE_SHARED_COUNTERS") or "off",
        events_per_sec = opts.events_per_sec or num_env("TOLLGATE_EVENTS_PER_SEC", 20),
    }
    local tp = opts.trusted_proxies or getenv("TOLLGATE_TRUSTED_PROXIES")
    local list, terr = ipmatch.parse_list(tp)
    if not list then
        error("TOLLGATE_TRUSTED_PROXIES must be comma-separated CIDRs: " .. terr, 0)
    end
    s.trusted_proxies = list
    if not keys.valid_id(s.node_id) then
        error("TOLLGATE_NODE_ID must match ^[A-Za-z0-9_-]{1,128}$, got '" .. s.node_id .. "'", 0)
    end
    if s.mode ~= "lease" and s.mode ~= "remote" then
        error("TOLLGATE_LIMITER_MODE must be 'lease' or 'remote', got '" .. s.mode .. "'", 0)
    end
    if s.op_timeout_ms <= 0 or s.op_timeout_ms > 100 then
        error("TOLLGATE_REDIS_TIMEOUT_MS must be in (0, 100]", 0)
    end
    if s.sync_interval <= 0 or s.batch_threshold < 1 or s.min_target < 1 then
        error("sync interval, batch threshold and reserve target must be positive", 0)
    end
    if s.jit_tune ~= "on" and s.jit_tune ~= "off" then
        error("TOLLGATE_JIT_TUNE must be 'on' or 'off', got '" .. s.jit_tune .. "'", 0)
    end
    if s.shared_counters ~= "on" and s.shared_counters ~= "off" then
        error("TOLLGATE_SHARED_COUNTERS must be 'on' or 'off', got '" .. s.shared_counters .. "'",
            0)
    end
    local ri = s.report_interval
    if type(ri) ~= "number" or ri < 0.1 or ri > 15 then
        error("TOLLGATE_REPORT_INTERVAL must be a number of seconds in [0.1, 15] (the control "
            .. "plane calls a node stale after 30 s without a report), got '"
            .. tostring(ri) .. "'", 0)
    end
    if s.fail_open_rate < 0 then
        error("TOLLGATE_FAIL_OPEN_RATE must be >= 0", 0)
    end
    local eps = s.events_per_sec
    if type(eps) ~= "number" or eps < 0 or eps > 100000 or eps ~= floor(eps) then
        error("TOLLGATE_EVENTS_PER_SEC must be an integer in [0, 100000], got '"
            .. tostring(eps) .. "'", 0)
    end
    return s
end

-- Parse and check one app config (JSON from ratelimit:apps). Returns table or nil, err.
local function parse_app(id, json)
    local c, err = cjson.decode(json)
    if type(c) ~= "table" then
        return nil, "bad json: " .. tostring(err)
    end
    local cluster = c.cluster_id
    if not keys.valid_id(cluster) then
        return nil, "invalid cluster_id"
    end
    local c_bw = c.c_bw == nil and 1 or c.c_bw
    if type(c_bw) ~= "number" or c_bw < 0 or c_bw ~= floor(c_bw) then
        return nil, "invalid c_bw"
    end
    local g, b = c.guaranteed_quota, c.burst_quota
    if type(g) ~= "number" or type(b) ~= "number" or g <= 0 or b < g then
        return nil, "invalid quotas"
    end
    local prio = c.priority
    if type(prio) ~= "number" or prio < 0 or prio > 3 then
        return nil, "invalid priority"
    end
    return {
        id = id,
        cluster = cluster,
        c_bw = c_bw,
        guaranteed = g,
        burst = b,
        priority = prio,
        enabled = c.enabled ~= false,
        -- Redis keys of this app (built once per config version, not per request)
        k_l2 = keys.l2(cluster, id),
        k_leases = keys.leases(cluster, id),
        k_stats = keys.stats(cluster, id),
        k_nodes = keys.nodes(cluster, id),
        k_l1 = keys.l1(cluster),
        k_em = "em:" .. cluster,    -- emergency state of the cluster in the ratelimit dict
    }
end
_M.parse_app = parse_app

-- per-worker cache, invalidated by the generation bumped on every reload
local cache = {}
local cache_n = 0
local cache_version = nil
local CACHE_MAX = 20000
local on_generation = {}    -- functions(generation) of per-worker state compiled from config
local gpage                 -- the generation's mirror (tollgate.genpage), nil without one
local NONE = genpage.NONE

local function get_generation()
    return cdict:get("generation")
end

--- Map the page that mirrors the generation. Only in the init phase (the master, whose workers
-- inherit it); elsewhere a no-op that returns nil. Returns nil, err when mapping failed.
function _M.share_generation()
    if ngx.get_phase() ~= "init" then
        return nil
    end
    local p, err = genpage.create(cdict)
    gpage = p
    return p, err
end

--- Make the mirror show the dict's generation (worker start; then once a second, for a writer
-- that died between moving the generation and publishing it).
function _M.publish_generation(always)
    if always then
        genpage.publish(gpage, get_generation)
    else
        genpage.check(gpage, get_generation)
    end
end

--- Call fn(generation) whenever this worker starts using a new config generation (on the
-- request path, before the request that noticed it is served).
function _M.on_generation(fn)
    on_generation[#on_generation + 1] = fn
end

--- The parsed config of app `id` if this worker has it at hand (the hot path's first try: a
-- hit needs no id validation, since only valid ids are ever cached as known apps).
function _M.cached(id)
    if gpage then
        if gpage[0] ~= (cache_version or NONE) then
            return nil
        end
    elseif get_generation() ~= cache_version then
        return nil
    end
    return cache[id] or nil
end

--- true when this worker's per-generation caches follow the current config generation (a
-- plain read of the generation's mirror when it has one).
function _M.current()
    if gpage then
        return gpage[0] == (cache_version or NONE)
    end
    return get_generation() == cache_version
end

--- Bring this worker's per-generation caches up to the current config generation (the request
-- path does it through cached() and app()). Returns the generation, nil when no config was
-- ever loaded.
function _M.refresh()
    local v = get_generation()
    if v ~= nil and v ~= cache_version then
        cache = {}
        cache_n = 0
        cache_version = v
        for i = 1, #on_generation do
            on_generation[i](v)
        end
    end
    return v
end

--- The config of app `id`, false when unknown, nil when no config was ever loaded.
function _M.app(id)
    if _M.refresh() == nil then
        return nil
    end
    local a = cache[id]
    if a ~= nil then
        return a
    end
    local s = cdict:get("app:" .. id)
    if s then
        a = parse_app(id, s) or false
    else
        a = false
    end
    if cache_n >= CACHE_MAX then
        cache = {}
        cache_n = 0
    end
    cache[id] = a
    cache_n = cache_n + 1
    return a
end

function _M.version()
    return cdict:get("version")
end

--- All known app ids (per worker, rebuilt when the version changes).
local ids_cache, ids_version = {}, nil
function _M.app_ids()
    local v = get_generation()
    if v ~= ids_version then
        local ids = {}
        for _, k in ipairs(cdict:get_keys(0)) do
            if k:sub(1, 4) == "app:" then
                ids[#ids + 1] = k:sub(5)
            end
        end
        ids_cache, ids_version = ids, v
    end
    return ids_cache
end

--- Load every app config from Redis (HSCAN, never KEYS) into config_dict.
-- An entry that does not parse keeps the last good config of that app and counts an error.
function _M.reload(red)
    local version, err = red:get(keys.config_version())
    if err then
        return nil, err
    end
    version = tonumber(version) or 0
    local bad, serr = hashload.into_dict(red, keys.apps_index(), cdict, "app:", "config for app",
        parse_app)
    if not bad then
        return nil, serr
    end
    local rbad, rerr = rules_parse.load(red, cdict)
    if not rbad then
        return nil, rerr
    end
    bad = bad + rbad
    local bbad, berr = breaker_config.reload(red, cdict)
    if not bbad then
        return nil, berr
    end
    bad = bad + bbad
    local ibad, ierr = require("tollgate.identity").reload(red)
    if not ibad then
        return nil, ierr
    end
    bad = bad + ibad
    if bad > 0 then
        cdict:incr("errors", bad, 0)
    end
    -- a strictly new value tells every worker to drop its parsed cache
    cdict:set("version", version)
    cdict:incr("generation", 1, 0)
    genpage.publish(gpage, get_generation)
    return version
end

--- Tell every worker that state compiled from config_dict or connlimit_dict is stale (no-op
-- while no config was ever loaded: nothing is compiled then).
function _M.bump()
    if cdict:incr("generation", 1) then
        genpage.publish(gpage, get_generation)
    end
end

_M.generation = get_generation

return _M
