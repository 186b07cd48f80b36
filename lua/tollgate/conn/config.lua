-- Limits of the connection limiter (Req 20): its settings (tollgate.settings), and the per-app
-- and per-cluster limits read from Redis (connlimit:{c}:config:<app> max_connections,
-- burst_connections; connlimit:{c}:cluster max_connections, reserved_ratio). The limits live in
-- connlimit_dict so that every worker sees a refresh at once:
--   lim:a:<app> = "max burst", lim:c:<cluster> = "max reserved_ratio"
-- and each worker keeps parsed entries (with the counter key names) per config generation: a
-- change bumps the generation of config_dict, which the request path reads anyway. Worker 0
-- re-reads them every config TTL and on every config notice; a config that does not validate
-- keeps the last good one, a missing one means the defaults, Redis down keeps what is known.
local keys = require("tollgate.keys")
local contract = require("tollgate.config.contract")
local cfgcache = require("tollgate.config.cache")
local settings = require("tollgate.settings")
local metrics = require("tollgate.metrics")

local dict = ngx.shared.connlimit_dict
local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local null = ngx.null
local format = string.format
local match = string.match
local floor = math.floor
local tonumber = tonumber

local _M = {}

local conn_conf            -- settings (configure)
local redis_client, BG_MS     -- Redis client and background timeout (init)
local PIPELINE = 500
local limited               -- function, below

--- The limiter's settings from the gateway's (the conn_* entries of tollgate.settings; read
-- from the environment when not given).
function _M.configure(s)
    s = s or settings.get()
    conn_conf = {
        timeout = s.conn_timeout,
        cleanup_interval = s.conn_cleanup_interval,
        cleanup_batch = s.conn_cleanup_batch,
        app_limit = s.conn_app_limit,
        cluster_limit = s.conn_cluster_limit,
        stats_interval = s.conn_stats_interval,
        config_ttl = s.conn_config_ttl,
        heartbeat = math.min(5, s.conn_timeout / 4),
        body_min_rate = s.body_min_rate,
        body_grace = s.body_grace,
        client_share = s.conn_client_share,
    }
    return conn_conf
end

function _M.settings()
    return conn_conf
end

local cache, cache_n = {}, 0
local CACHE_MAX = 20000
-- a new generation drops the entries of the apps and clusters it names (all without a journal)
cfgcache.on_generation(function(_, drop)
    if not drop or drop.conn_all then
        cache, cache_n = {}, 0
        return
    end
    for _, kind in ipairs({ "app", "conn_app" }) do
        for id in pairs(drop[kind] or {}) do
            if cache[id] then
                cache[id] = nil
                cache_n = cache_n - 1
            end
        end
    end
    local cl = drop.conn_cluster
    if cl then
        for id, e in pairs(cache) do
            if cl[e.cluster] then
                cache[id] = nil
                cache_n = cache_n - 1
            end
        end
    end
end)

function _M.init(client, bg_ms)
    redis_client, BG_MS = client, bg_ms
end

--- The limits of app `id` in `cluster` and the names of its counters, cached per config
-- generation: on the request path cfgcache.cached() or cfgcache.app() has just brought the caches
-- up to date; elsewhere call cfgcache.refresh() first.
function _M.entry(id, cluster)
    local e = cache[id]
    if e and e.cluster == cluster then
        return e
    end
    local max, burst = match(dict:get("lim:a:" .. id) or "", "^(%d+) (%d+)$")
    local cmax, ratio = match(dict:get("lim:c:" .. cluster) or "", "^(%d+) (%S+)$")
    max = tonumber(max) or conn_conf.app_limit
    cmax = tonumber(cmax) or conn_conf.cluster_limit
    local labels = format('app_id="%s",cluster_id="%s"', id, cluster)
    e = {
        id = id, cluster = cluster,
        max = max, burst = tonumber(burst) or max, cmax = cmax,
        headroom = floor(cmax * (1 - (tonumber(ratio) or 0.1))),
        akey = "ca:" .. id, ckey = "cc:" .. cluster,           -- in flight
        pkey = "pa:" .. id, pckey = "pc:" .. cluster,          -- peaks
        rkey = "ra:" .. id, rckey = "rc:" .. cluster,          -- rejected
        peak = 0, cpeak = 0,            -- lower bounds of the shared peaks seen by this worker
        s_app = "connlimit_rejected_total{" .. labels .. ',reason="app_limit_exceeded"}',
        s_cluster = "connlimit_rejected_total{" .. labels .. ',reason="cluster_limit_exceeded"}',
        s_client = "connlimit_rejected_total{" .. labels .. ',reason="client_limit_exceeded"}',
    }
    -- the counters the alerts read exist at 0 before the app's first refusal or leak here
    metrics.zero(e.s_app)
    metrics.zero(e.s_cluster)
    metrics.zero("connlimit_leaked_total{" .. labels .. "}")
    if cache_n >= CACHE_MAX then
        cache, cache_n = {}, 0
    end
    cache[id] = e
    cache_n = cache_n + 1
    return e
end

local bump = cfgcache.bump

--- Set (or with max nil, clear) the limits of app `id`; validated like a config from Redis.
function _M.set_app_limits(id, max, burst, no_bump)
    if max == nil then
        dict:delete("lim:a:" .. id)
    else
        burst = burst or max
        local field, why = contract.app_limits(max, burst)
        if field then
            return nil, field .. ": " .. why
        end
        dict:set("lim:a:" .. id, format("%d %d", max, burst))
    end
    if not no_bump then
        bump()
    end
    return true
end

--- Set (or with max nil, clear) the limit of a cluster and the share burst may not use.
function _M.set_cluster_limits(cluster, max, ratio, no_bump)
    if max == nil then
        dict:delete("lim:c:" .. cluster)
    else
        ratio = ratio or 0.1
        local field, why = contract.cluster_limits(max, ratio)
        if field then
            return nil, field .. ": " .. why
        end
        dict:set("lim:c:" .. cluster, format("%d %s", max, ratio))
    end
    if not no_bump then
        bump()
    end
    return true
end

local function field(v)
    if v == null or v == nil then
        return nil
    end
    return tonumber(v) or -1        -- not a number: fails validation
end

-- Apply one HMGET reply; a config that does not validate keeps the last good one.
local function apply(set, id, reply, what)
    local ok, err
    if type(reply) ~= "table" or reply[1] == false then
        ok, err = nil, tostring(reply and reply[2])
    elseif field(reply[1]) == nil and field(reply[2]) ~= nil then
        ok, err = nil, "max_connections is missing"
    else
        ok, err = set(id, field(reply[1]), field(reply[2]), true)
    end
    if not ok then
        log(ERR, "tollgate: bad connection config of ", what, " ", id, " (", err,
            "), keeping the last good one")
        ngx.shared.config_dict:incr("errors", 1, 0)
    end
end

-- One pipeline of HMGETs: the limits of apps[from..to] (parsed configs), or, with `clusters`,
-- of those cluster ids; applied as soon as they come (no yield between the read and the write,
-- so that a change applied meanwhile is not overwritten by an older read). Returns true or nil,
-- err.
local function fetch_apply(red, list, from, to, clusters)
    red:init_pipeline()
    for i = from, to do
        local x = list[i]
        if clusters then
            red:hmget(keys.conn_cluster(x), "max_connections", "reserved_ratio")
        else
            red:hmget(keys.conn_config(x.cluster, x.id), "max_connections", "burst_connections")
        end
    end
    local r, err = red:commit_pipeline()
    if not r then
        return nil, err
    end
    for i = from, to do
        if clusters then
            apply(_M.set_cluster_limits, list[i], r[i - from + 1], "cluster")
        else
            apply(_M.set_app_limits, list[i].id, r[i - from + 1], "app")
        end
    end
    return true
end

--- Read the limits of `apps` (parsed configs or {id, cluster}) and `clusters` (ids) on
--- connection `red`, pipelined in batches, and put them in connlimit_dict; forget those of the
--- apps `removed` (ids); no new generation (the caller's follows). Returns true or nil, err.
function _M.read(red, apps, clusters, removed)
    for _, id in ipairs(removed or {}) do
        dict:delete("lim:a:" .. id)
    end
    for i = 1, #apps, PIPELINE do
        local ok, err = fetch_apply(red, apps, i, math.min(i + PIPELINE - 1, #apps))
        if not ok then
            return nil, err
        end
    end
    for i = 1, #clusters, PIPELINE do
        local ok, err = fetch_apply(red, clusters, i, math.min(i + PIPELINE - 1, #clusters), true)
        if not ok then
            return nil, err
        end
    end
    return true
end

-- Of `apps` ({id, cluster}), those whose limits a full refresh must read: the members of their
-- clusters' sets of apps with limits (connlimit:{c}:limited, SSCAN; kept by the control plane
-- with the limits) and those this node holds limits for (a limit removed meanwhile is read as
-- gone, and a change applied during the scan is read again, never dropped unread); every app
-- when the control plane has not indexed the store yet (connlimit:indexed unset). Returns the
-- list, or nil, err.
limited = function(red, apps, clusters)
    local indexed, err = red:get(keys.conn_indexed())
    if err then
        return nil, err
    end
    if indexed == null then
        return apps
    end
    local members = {}
    for _, c in ipairs(clusters) do
        local set, cursor = {}, "0"
        repeat
            local r, serr = red:sscan(keys.conn_limited(c), cursor, "COUNT", 1000)
            if not r then
                return nil, serr
            end
            cursor = r[1]
            for _, id in ipairs(r[2]) do
                set[id] = true
            end
        until cursor == "0"
        members[c] = set
    end
    local out = {}
    for _, a in ipairs(apps) do
        if members[a.cluster][a.id] or dict:get("lim:a:" .. a.id) then
            out[#out + 1] = a
        end
    end
    return out
end

--- Re-read the limits of the apps `list` ({id, cluster}; when nil, every app the node holds,
--- cfgcache.app_ids()) and their clusters from Redis (worker 0), then a new generation that names
--- them (workers drop those entries only), or, for every app (`all`), that drops every worker's
--- connection-limit entries ("conn_all") and nothing else.
function _M.refresh(reason, list, all)
    local apps, clusters, seen = {}, {}, {}
    local function add(a)
        if a then
            apps[#apps + 1] = a
            if not seen[a.cluster] then
                seen[a.cluster] = true
                clusters[#clusters + 1] = a.cluster
            end
        end
    end
    if list then
        for i = 1, #list do
            add(list[i])
        end
    else
        all = true
        for _, id in ipairs(cfgcache.app_ids()) do
            add(cfgcache.app(id))
        end
    end
    local res, err = redis_client:with(BG_MS, function(red)
        local read = apps
        if all then
            local lerr
            read, lerr = limited(red, apps, clusters)
            if not read then
                return nil, lerr
            end
        end
        local ok, rerr = _M.read(red, read, clusters)
        if not ok then
            return nil, rerr
        end
        return true
    end)
    if not res then
        log(WARN, "tollgate: connection limits not refreshed (", reason, "): ", err)
        return nil, err
    end
    if all then
        ngx.shared.config_dict:incr("conn_full_reads", 1, 0)    -- /metrics: conn_full_reads
        cfgcache.bump({ "conn_all -" })
    else
        local journal = {}
        for _, a in ipairs(apps) do
            journal[#journal + 1] = "conn_app " .. a.id
        end
        for _, c in ipairs(clusters) do
            journal[#journal + 1] = "conn_cluster " .. c
        end
        cfgcache.bump(journal)
    end
    return true
end

return _M
