-- Connection limiter (Req 17-19, docs/design.md §6): requests in flight per app and per storage
-- cluster, checked before the token bucket and released in the log phase.
-- In-flight counts move only by atomic increments (connlimit_dict:incr),
-- increment-then-check with undo, so two workers can never both take the last slot. Limits:
-- tollgate.conn.config; tracking records: tollgate.conn.record, .track (this worker's, with
-- the heartbeat) and .cleanup (leaks).
-- An app may use burst_connections beyond max_connections only while its cluster has headroom:
-- the cluster's count, this request included, stays within (1 - reserved_ratio) of its limit.
-- connlimit_dict counters: ca:<app> / cc:<cluster> in flight, pa: / pc: peaks (pa:<app>:<n>
-- markers), ra: / rc: rejected, la:<app> force-released, th:<app> above 90 % since the last
-- threshold_exceeded event; node totals leaked_total and cleanup_last_run (Unix s).
local keys = require("tollgate.keys")
local rredis = require("tollgate.redis.client")
local cfgcache = require("tollgate.config.cache")
local active = require("tollgate.lease.active")
local metrics = require("tollgate.metrics")
local response = require("tollgate.request.response")
local limits = require("tollgate.conn.config")
local track = require("tollgate.conn.track")
local record = require("tollgate.conn.record")
local cleanup = require("tollgate.conn.cleanup")
local events = require("tollgate.events")
local authbudget = require("tollgate.request.authbudget")

local dict = ngx.shared.connlimit_dict
local var = ngx.var
local now = ngx.now
local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local format = string.format
local floor = math.floor
local header = ngx.header
local get_request = require("resty.core.base").get_request
local http_version = ngx.req.http_version

local _M = {
    configure = limits.configure,
    settings = limits.settings,
    set_app_limits = limits.set_app_limits,
    set_cluster_limits = limits.set_cluster_limits,
    refresh = limits.refresh,
}

local entry = limits.entry
local redis_client, BG_MS, NODE
local MIN_RATE, GRACE = 0, 0    -- body deadline (start): bytes/s, seconds
local SHARE, IP_TTL = 0.5, 300  -- share of an app's slots one client address may hold
local STATS_TTL = 300
local FULL_HEADERS = false      -- TOLLGATE_RESPONSE_HEADERS=full: the counts on admitted answers

-- Peak = the highest count any acquire saw (Property 19). Counts move by one, so every value
-- up to the peak was returned by some incr: whoever first adds the marker of a value raises
-- the peak by one, which keeps the shared peak exact and monotonic without a lock.
local function raise_peak(pkey, v, known)
    if v <= known then
        return known
    end
    for m = (dict:get(pkey) or 0) + 1, v do
        if dict:add(pkey .. ":" .. m, true, 60) then
            dict:incr(pkey, 1, 0)
        end
    end
    return v
end

-- X-Connection-* headers, of a refusal and (TOLLGATE_RESPONSE_HEADERS=full) of an admitted
-- request: created from Lua, where they are sent; an add_header line in the location snippet
-- would cost its variable's evaluation on every response, those without the header too
local function set_headers(limit, current)
    header["X-Connection-Limit"] = limit
    header["X-Connection-Current"] = current
    header["X-Connection-Remaining"] = current < limit and limit - current or 0
end

-- current: the count this request saw without itself, capped at what can really be in flight
-- (concurrent refused requests may still hold an increment they are about to undo)
local function reject(e, reason, limit, current)
    dict:incr(e.rkey, 1, 0)
    dict:incr(e.rckey, 1, 0)
    metrics.inc(reason == "app_limit_exceeded" and e.s_app
        or reason == "client_limit_exceeded" and e.s_client or e.s_cluster)
    set_headers(limit, current)
    return false, reason, limit, current
end

-- threshold_exceeded, once per upward crossing of 90 % of the app's limit: counts move by one,
-- so exactly one acquire sees each value; the th:<app> marker (removed when the count falls
-- back below 80 %) keeps a count that hovers around 90 % from firing again and again
local function crossed(e, v)
    if not dict:add("th:" .. e.id, true) then
        return
    end
    events.emit({
        event_type = "threshold_exceeded", severity = "warning", app_id = e.id,
        rule_type = "connection", limit_value = e.max, current_usage = v,
        reason = "connections_high",
    })
end

-- The key of the per-address count of (app, addr): kept on the app's entry, so that a request
-- from an address seen before builds no string (at most IP_KEYS addresses per app and worker;
-- the table starts again when full)
local IP_KEYS = 4096
local function ip_key(e, addr)
    local t = e.ipk
    if not t or e.ipk_n >= IP_KEYS then
        t = {}
        e.ipk, e.ipk_n = t, 0
    end
    local k = t[addr]
    if not k then
        k = "ip:" .. e.id .. ":" .. addr
        t[addr] = k
        e.ipk_n = e.ipk_n + 1
    end
    return k
end

--- Take a slot for app `a` ({id, cluster}); on success ctx remembers it for release().
-- headers: the request's (the client address of the per-address share: $remote_addr, or
-- X-Forwarded-For behind TOLLGATE_TRUSTED_PROXIES, as the auth-failure budget reads it).
-- Returns true, or false and `app_limit_exceeded` / `cluster_limit_exceeded` /
-- `client_limit_exceeded`.
function _M.acquire(a, ctx, headers)
    local e = entry(a.id, a.cluster)
    local v, err = dict:incr(e.akey, 1, 0)
    if not v then
        log(ERR, "tollgate: connlimit_dict: ", err, "; request admitted without a slot")
        return true
    end
    if v > e.burst then
        dict:incr(e.akey, -1)
        return reject(e, "app_limit_exceeded", e.max, e.burst)
    end
    local c
    c, err = dict:incr(e.ckey, 1, 0)
    if not c then
        dict:incr(e.akey, -1)
        log(ERR, "tollgate: connlimit_dict: ", err, "; request admitted without a slot")
        return true
    end
    if v > e.max and c > e.headroom then
        dict:incr(e.ckey, -1)
        dict:incr(e.akey, -1)
        return reject(e, "app_limit_exceeded", e.max, v - 1)
    end
    if c > e.cmax then
        dict:incr(e.ckey, -1)
        dict:incr(e.akey, -1)
        return reject(e, "cluster_limit_exceeded", e.cmax, e.cmax)
    end
    local ikey, addr
    if SHARE < 1 then
        -- one client address holds at most SHARE of the app's slots (at least one)
        local cap = floor(e.burst * SHARE)
        addr = headers and authbudget.client(headers) or var.remote_addr
        ikey = ip_key(e, addr or "-")
        local iv = dict:incr(ikey, 1, 0, IP_TTL)
        if iv and iv > (cap > 1 and cap or 1) then
            dict:incr(ikey, -1)
            dict:incr(e.ckey, -1)
            dict:incr(e.akey, -1)
            return reject(e, "client_limit_exceeded", cap > 1 and cap or 1, iv - 1)
        end
    end
    local tag = e.tag
    if tag == nil then
        tag = record.tag(a.id, a.cluster) or false
        e.tag = tag
    end
    local n, rid = track.open(addr or var.remote_addr, tag or nil)
    if not n then
        if ikey then
            dict:incr(ikey, -1)
        end
        dict:incr(e.ckey, -1)
        dict:incr(e.akey, -1)
        log(ERR, "tollgate: connlimit_dict: ", rid, "; request admitted without a slot")
        return true
    end
    ctx.tg_conn, ctx.tg_conn_rid, ctx.tg_conn_e, ctx.tg_conn_ip = n, rid, e, ikey or false
    if v * 10 >= e.max * 9 and (v - 1) * 10 < e.max * 9 then
        crossed(e, v)
    end
    e.peak = raise_peak(e.pkey, v, e.peak)
    e.cpeak = raise_peak(e.pckey, c, e.cpeak)
    if FULL_HEADERS then
        set_headers(e.max, v)
    end
    return true
end

--- Release the slot ctx holds (log phase; any later call is a no-op). True if this call did.
function _M.release(ctx)
    local n = ctx.tg_conn
    if not n then
        return false
    end
    ctx.tg_conn = nil
    local won, held = track.close(n, ctx.tg_conn_rid)
    if not won then
        return false
    end
    local e = ctx.tg_conn_e
    if ctx.tg_conn_ip then
        dict:incr(ctx.tg_conn_ip, -1)
    end
    -- in the reverse order of acquire: a release in progress never makes the cluster look
    -- fuller than the apps in it, which would refuse other apps
    local c = dict:incr(e.ckey, -1)
    local v = dict:incr(e.akey, -1)
    if (v and v < 0) or (c and c < 0) then
        log(ERR, "tollgate: connection counter of ", e.id, "/", e.cluster, " below zero")
    end
    if v and v * 10 < e.max * 8 and (v + 1) * 10 >= e.max * 8 then
        dict:delete("th:" .. e.id)     -- fell below 80 %: the next crossing of 90 % is news
    end
    metrics.conn_duration(held)
    return true
end

-- The uploads a body deadline applies to: their backend answers once the body is in. Others
-- with a body (CompleteMultipartUpload: the backend may assemble the object for minutes after a
-- small body; DeleteObjects: its body is read in the access phase) have none.
local DEADLINE_OPS = { PutObject = true, UploadPart = true, PostObject = true, Patch = true }

--- An upload (op) with a body of `bytes` (announced) must be done within body_grace seconds
-- plus bytes / body_min_rate: past that, its connection is ended and its slot comes back (a
-- trickle cannot hold a slot; nginx's client_body_timeout is per read only).
function _M.body_deadline(ctx, bytes, op)
    local n = ctx.tg_conn
    -- HTTP/1.x only: an HTTP/2 stream shares its connection's socket with the client's other
    -- streams, which ending it would end too
    if n and MIN_RATE > 0 and DEADLINE_OPS[op] and http_version() < 2 then
        track.deadline(n, ctx.tg_conn_rid, now() + GRACE + bytes / MIN_RATE, get_request())
    end
end

-- A request the body deadline ended: counted by app, logged, an event.
local function cut(tag, ip)
    local app = record.untag(tag) or "_unknown"
    metrics.inc('connlimit_body_deadline_total{app_id="' .. app .. '"}')
    log(WARN, "tollgate: connlimit: ended a request of ", app, " from ", ip,
        " past its body deadline")
    events.emit({
        event_type = "request_blocked", severity = "warning", app_id = app, ip_address = ip,
        rule_type = "connection", action_taken = "closed",
        reason = "body_deadline",
    })
end

--- The 429 of a connection-limit rejection (headers were set by acquire).
function _M.refuse(reason)
    return response.too_many(reason, 0, 1, { remaining = 0 })
end

-- A slot the cleanup force-released (its request's worker is gone).
local function leaked(app, cluster)
    dict:incr("cc:" .. cluster, -1)
    dict:incr("ca:" .. app, -1)
    dict:incr("la:" .. app, 1, 0)
    dict:incr("leaked_total", 1, 0)
    metrics.inc(format('connlimit_leaked_total{app_id="%s",cluster_id="%s"}', app, cluster))
end

--- Counters and limits of app `id` in `cluster` on this node.
function _M.state(id, cluster)
    cfgcache.refresh()
    local e = entry(id, cluster)
    return {
        app_current = dict:get(e.akey) or 0, app_peak = dict:get(e.pkey) or 0,
        app_rejected = dict:get(e.rkey) or 0, app_leaked = dict:get("la:" .. id) or 0,
        cluster_current = dict:get(e.ckey) or 0, cluster_peak = dict:get(e.pckey) or 0,
        cluster_rejected = dict:get(e.rckey) or 0,
        max = e.max, burst = e.burst, cluster_max = e.cmax, headroom = e.headroom,
    }
end

--- One leak cleanup run (tollgate.conn.cleanup), remembered as the node's last run.
function _M.cleanup(budget)
    local leaked_n, work = cleanup.run(budget)
    dict:set("cleanup_last_run", floor(now()))
    return leaked_n, work
end

--- Node report: slots force-released since the node started, Unix time of the last cleanup.
function _M.leak_stats()
    return dict:get("leaked_total") or 0, dict:get("cleanup_last_run") or 0
end

-- Timers -------------------------------------------------------------------------------

-- Node statistics (Req 19.6): connlimit:{c}:stats:<app>:node:<node>, for the control plane
-- to aggregate across nodes; an app with connections in flight is marked in its cluster's
-- active set, which the control plane's live collector reads.
local function report()
    local rows = {}
    for _, id in ipairs(active.list()) do   -- apps with local state, not every app
        local a = cfgcache.app(id)
        local cur = a and dict:get("ca:" .. id)
        if cur then
            rows[#rows + 1] = { keys.conn_node_stats(a.cluster, id, NODE), cur,
                                dict:get("pa:" .. id) or 0, dict:get("ra:" .. id) or 0,
                                cur > 0 and a.k_active, id }
        end
    end
    if #rows == 0 then
        return
    end
    local t = floor(now())
    local ok, err = redis_client:with(BG_MS, function(red)
        red:init_pipeline()
        for _, r in ipairs(rows) do
            red:hset(r[1], "current", r[2], "peak", r[3], "rejected", r[4], "last_seen", t)
            red:expire(r[1], STATS_TTL)
            if r[5] then    -- connections in flight: the control plane's collector reads the app
                red:zadd(r[5], t, r[6])
            end
        end
        local res, perr = red:commit_pipeline()
        if not res then
            return nil, perr
        end
        local cerr = rredis.pipeline_error(res)
        if cerr then
            return nil, cerr    -- e.g. READONLY: with() must close this connection
        end
        return res
    end)
    if not ok then
        log(WARN, "tollgate: connection stats not reported: ", err)
    end
end

-- /metrics gauges, read at scrape time.
local function gauges(g)
    local clusters = {}
    for _, id in ipairs(active.list()) do   -- apps with local state, not every app
        local a = cfgcache.app(id)
        local cur = a and dict:get("ca:" .. id)
        if cur then
            local l = format('{app_id="%s",cluster_id="%s"}', id, a.cluster)
            g["connlimit_active_connections" .. l] = cur
            g["connlimit_peak_connections" .. l] = dict:get("pa:" .. id) or 0
            clusters[a.cluster] = true
        end
    end
    for c in pairs(clusters) do
        local l = format('{cluster_id="%s"}', c)
        g["connlimit_cluster_active_connections" .. l] = dict:get("cc:" .. c) or 0
        g["connlimit_cluster_peak_connections" .. l] = dict:get("pc:" .. c) or 0
    end
end

local function every(interval, fn)
    local ok, err = ngx.timer.every(interval, function(premature)
        if not premature then
            fn()
        end
    end)
    if not ok then
        log(ERR, "tollgate: connlimit: cannot start timer: ", err)
    end
end

--- init_worker: tracking generation, heartbeat; on worker 0 cleanup, stats, limit refresh.
function _M.start(settings, client)
    local conf = limits.settings() or limits.configure()
    redis_client, BG_MS, NODE = client, settings.bg_timeout_ms, settings.node_id
    limits.init(client, BG_MS)
    track.init(conf)
    cleanup.init(conf, leaked)
    metrics.add_gauges(gauges)
    every(conf.heartbeat, track.heartbeat)
    MIN_RATE, GRACE = conf.body_min_rate or 0, conf.body_grace or 0
    SHARE, IP_TTL = conf.client_share or 0.5, conf.timeout
    FULL_HEADERS = settings.response_headers == "full"
    if MIN_RATE > 0 then
        track.deadline_check(cut, math.min(1, GRACE))
    end
    if ngx.worker.id() == 0 then
        dict:set("cleanup_last_run", floor(now()))    -- the schedule starts now
        every(conf.cleanup_interval, function() _M.cleanup() end)
        every(conf.stats_interval, report)
        -- the apps with state on the node (a config notice refreshes the others)
        every(conf.config_ttl, function()
            cfgcache.refresh()
            local list = {}
            for _, id in ipairs(active.list()) do
                local a = cfgcache.app(id)
                if a then
                    list[#list + 1] = a
                end
            end
            _M.refresh("ttl", list)
        end)
    end
end

_M.report = report

return _M
