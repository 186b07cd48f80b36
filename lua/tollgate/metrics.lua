-- Prometheus metrics. The request path only bumps per-worker Lua tables (no shared-memory
-- work); a timer flushes them into the tollgate_metrics dict every second, and /metrics renders
-- the dict (plus gauges read at scrape time) as Prometheus text.
local mdict = ngx.shared.tollgate_metrics

local pairs = pairs
local format = string.format
local concat = table.concat
local sort = table.sort
local find = string.find
local sub = string.sub

local _M = {}

local COST_BUCKETS = { 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000, 100000, 1000000 }
local LATENCY_BUCKETS = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 }
local CONN_BUCKETS = { 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300 }
_M.COST_BUCKETS = COST_BUCKETS

-- the shared dicts of nginx/tollgate_http.conf, whose fill /metrics shows
local ZONES = { "ratelimit", "connlimit_dict", "config_dict", "tollgate_active", "tollgate_metrics",
                "tollgate_rules", "tollgate_events", "tollgate_breakers", "tollgate_authfail",
                "tollgate_lookup" }

local HELP = {
    ratelimit_requests_total = { "counter", "Requests by app, method and status." },
    ratelimit_request_cost = { "histogram", "Cost charged per request (tokens)." },
    ratelimit_redis_latency_seconds = { "histogram", "Latency of Redis round trips." },
    ratelimit_l3_hits_total = { "counter", "Requests admitted from the local lease." },
    ratelimit_l3_misses_total = { "counter", "Requests that found the local lease empty." },
    ratelimit_l3_cache_hit_ratio = { "gauge", "Local hits / (hits + misses) on this node." },
    ratelimit_sync_apps_visited = { "gauge",
        "Apps the last sync tick visited (those with local state on this node)." },
    ratelimit_l3_tokens = { "gauge", "Tokens held in the local lease by app." },
    ratelimit_l3_debt = { "gauge", "Post-hoc charges the lease could not cover, by app." },
    ratelimit_l3_reserve_target = { "gauge", "Adaptive reserve target of the local lease by app." },
    ratelimit_rejected_total = { "counter", "Requests rejected, by app and reason." },
    ratelimit_redis_calls_total = { "counter", "Redis round trips by operation." },
    ratelimit_redis_errors_total = { "counter", "Failed Redis round trips by kind." },
    ratelimit_breaker_opened_total = { "counter", "Times a failure opened the Redis breaker." },
    ratelimit_redis_redirects_total = { "counter", "Redis Cluster MOVED/ASK/TRYAGAIN replies." },
    ratelimit_reservations_total = { "counter", "Multipart reservations by result." },
    ratelimit_reserved_tokens = { "gauge", "Tokens held by open multipart reservations." },
    ratelimit_reservations_active = { "gauge", "Open multipart reservations." },
    ratelimit_degradation_level = { "gauge", "0 normal, 1 mild, 2 significant, 3 unavailable." },
    ratelimit_rollbacks_total = { "counter", "Charges returned for cancelled requests by app." },
    ratelimit_reports_total = { "counter", "Consumption reports by result." },
    ratelimit_returned_tokens_total = { "counter", "Idle lease tokens returned to L2." },
    ratelimit_recovered_grant_tokens_total = { "counter",
        "Tokens of a grant whose reply timed out, recovered by the next grant." },
    ratelimit_fail_open_total = { "counter", "Requests admitted by the fail-open budget." },
    ratelimit_bytes_total = { "counter",
        "Body bytes by app and direction (out: downloads to clients, in: uploads)." },
    ratelimit_paced_seconds_total = { "counter",
        "Seconds downloads spent paced to their app's share, by app." },
    ratelimit_config_errors_total = { "counter", "App configs rejected by this node." },
    ratelimit_config_store_lost = { "gauge",
        "1 while the config store is not the one this node knew (epoch gone or changed, "
            .. "version back)." },
    ratelimit_config_store_lost_total = { "counter",
        "Times this node found the config store lost." },
    ratelimit_config_version = { "gauge", "Config version this node enforces." },
    ratelimit_config_full_loads_total = { "counter",
        "Full loads of the config (new node, change log gap, a change logged as all)." },
    ratelimit_config_conn_full_reads_total = { "counter",
        "Reads of every held app's connection limits done (after each full load)." },
    ratelimit_config_changes_applied_total = { "counter",
        "Config changes applied one by one from the change log." },
    ratelimit_config_cache_wipes_total = { "counter",
        "Times a worker dropped all its parsed config (a generation without a journal)." },
    ratelimit_config_dict_partial = { "gauge",
        "1 while config_dict could not hold every app (the rest are looked up on demand)." },
    ratelimit_config_dict_full_total = { "counter",
        "App configs config_dict had no room for." },
    ratelimit_config_lookups_total = { "counter",
        "Apps, access keys and buckets looked up in Redis on demand (config_dict partial, or a "
        .. "first load)." },
    ratelimit_config_lookup_errors_total = { "counter",
        "On-demand lookups that failed (the request failed open, one budget for all of them)." },
    ratelimit_config_lookups_refused_total = { "counter",
        "Ids not looked up for want of the node's lookup budget (answered unknown)." },
    ratelimit_config_lookup_negative_hits_total = { "counter",
        "Ids answered unknown from the negative cache (no Redis call)." },
    ratelimit_shm_capacity_bytes = { "gauge", "Size of a shared dict (lua_shared_dict) by zone." },
    ratelimit_worker_lua_memory_bytes = { "gauge",
        "Lua heap of an nginx worker (collectgarbage count), by worker, noted every second." },
    ratelimit_shm_free_bytes = { "gauge",
        "Free pages of a shared dict by zone (0: new keys only fit in partly used pages)." },
    ratelimit_rule_hits_total = { "counter", "Requests a rule matched, by rule." },
    ratelimit_rule_actions_total = { "counter",
        "Rule outcomes by rule and action (blocked, throttled, shadowed, fail_open)." },
    connlimit_active_connections = { "gauge", "Requests in flight on this node by app." },
    connlimit_peak_connections = { "gauge", "Highest requests in flight on this node by app." },
    connlimit_cluster_active_connections = { "gauge", "Requests in flight by cluster." },
    connlimit_cluster_peak_connections = { "gauge", "Highest requests in flight by cluster." },
    connlimit_rejected_total = { "counter", "Requests refused by the connection limiter." },
    connlimit_leaked_total = { "counter", "Slots of lost requests force-released by cleanup." },
    connlimit_body_deadline_total = { "counter",
        "Requests whose connection was ended past their body deadline, by app." },
    connlimit_duration_seconds = { "histogram", "Time requests held a connection slot." },
    ratelimit_circuit_state = { "gauge", "Breaker by backend: 0 closed, 1 half-open, 2 open." },
    ratelimit_circuit_rejected_total = { "counter", "Requests refused by an open breaker." },
    ratelimit_circuit_transitions_total = { "counter", "Breaker state changes by target state." },
    ratelimit_events_dropped_total = { "counter", "Event entries lost (queue full, Redis down)." },
    tollgate_build_info = { "gauge", "Always 1: the version of this build, by component." },
    ratelimit_s3_operations_total = { "counter", "Admitted requests by S3 operation." },
    ratelimit_s3_cost_total = { "counter",
        "Tokens charged by S3 operation (after post-hoc charges and refunds)." },
    ratelimit_auth_failures_total = { "counter",
        "Requests the backend refused as unauthenticated (refunded), and those the gateway "
            .. "refused once their address's budget of such failures was spent, by app." },
}

local ALWAYS_DESCRIBED = { "ratelimit_s3_operations_total", "ratelimit_s3_cost_total",
                          "ratelimit_auth_failures_total" }

-- per-worker accumulators
local req = {}           -- req[app][method][status] = n
local cost_b = {}        -- index -> n
local cost_sum, cost_n = 0, 0
local lat_b = {}
local lat_sum, lat_n = 0, 0
local hits, misses = 0, 0
local other = {}         -- series -> n (rare events)
local conn_b = {}        -- connection slot hold times
local conn_sum, conn_n = 0, 0
local gauge_sources = {} -- functions adding gauges read at scrape time
local extra_blocked = {} -- app -> refusals that are not 429s (circuit breaker 503s)
local ops_n, ops_cost = {}, {}  -- S3 operation -> admitted requests, tokens charged

for i = 1, #COST_BUCKETS + 1 do cost_b[i] = 0 end
for i = 1, #LATENCY_BUCKETS + 1 do lat_b[i] = 0 end
for i = 1, #CONN_BUCKETS + 1 do conn_b[i] = 0 end

--- index(v) for a histogram's upper bounds: the first i with v <= buckets[i], #buckets + 1
-- above them all. Compiled into a binary search of nested ifs: a loop over the bounds would be
-- an inner loop in the log phase's trace (a trace of its own, entered and left per request).
local function bucketer(buckets)
    local function search(lo, hi)   -- the answer is in lo..hi
        if lo == hi then
            return "return " .. lo
        end
        local mid = math.floor((lo + hi) / 2)
        return string.format("if v <= %.17g then %s else %s end", buckets[mid],
            search(lo, mid), search(mid + 1, hi))
    end
    return assert(loadstring("local v = ...\n" .. search(1, #buckets + 1), "=bucketer"))
end
_M.bucketer = bucketer
local cost_index = bucketer(COST_BUCKETS)
local latency_index = bucketer(LATENCY_BUCKETS)
local conn_index = bucketer(CONN_BUCKETS)

function _M.request(app, method, status, cost)
    local a = req[app]
    if not a then
        a = {}
        req[app] = a
    end
    local m = a[method]
    if not m then
        m = {}
        a[method] = m
    end
    m[status] = (m[status] or 0) + 1
    if cost and cost > 0 then
        local i = cost_index(cost)
        cost_b[i] = cost_b[i] + 1
        cost_sum = cost_sum + cost
        cost_n = cost_n + 1
    end
end

--- An admitted request of S3 operation `op` (a name of the bounded operation table) that was
-- charged `cost` tokens in the end.
function _M.operation(op, cost)
    ops_n[op] = (ops_n[op] or 0) + 1
    if cost and cost > 0 then
        ops_cost[op] = (ops_cost[op] or 0) + cost
    end
end

function _M.hit() hits = hits + 1 end
function _M.miss() misses = misses + 1 end

function _M.redis_latency(sec)
    local i = latency_index(sec)
    lat_b[i] = lat_b[i] + 1
    lat_sum = lat_sum + sec
    lat_n = lat_n + 1
end

--- Seconds a request held its connection slot.
function _M.conn_duration(sec)
    local i = conn_index(sec)
    conn_b[i] = conn_b[i] + 1
    conn_sum = conn_sum + sec
    conn_n = conn_n + 1
end

--- Count a refusal that is not a 429 (those are counted by status) in the node totals.
function _M.blocked(app)
    extra_blocked[app] = (extra_blocked[app] or 0) + 1
end

--- Note this worker's Lua heap (every second, from each worker's flush timer): a scrape is
-- served by one worker and could not read the others'.
function _M.note_lua_memory()
    mdict:set('ratelimit_worker_lua_memory_bytes{worker="' .. ngx.worker.id() .. '"}',
        collectgarbage("count") * 1024)
end

--- Register fn(gauges), called at every render to add gauges read at scrape time.
function _M.add_gauges(fn)
    gauge_sources[#gauge_sources + 1] = fn
end

--- Create a counter series at 0 unless it exists: a series an alert reads with increase()
-- must exist before its first event, or that event is the series' first sample and counts for
-- nothing (deploy/prometheus/tollgate-alerts.yml).
function _M.zero(series)
    mdict:add(series, 0)
end

local BYTES_KEY = { ["in"] = "tg_m_in", out = "tg_m_out" }

--- The series counting app `a`'s body bytes in `direction` ("in" or "out"): the name is built
--- once and kept on the app's parsed config.
function _M.bytes_series(a, direction)
    local key = BYTES_KEY[direction]
    local series = a[key]
    if not series then
        series = 'ratelimit_bytes_total{app_id="' .. a.id .. '",direction="' .. direction .. '"}'
        a[key] = series
    end
    return series
end

--- Count a rare event under a full series name, e.g. 'ratelimit_rejected_total{...}'.
function _M.inc(series, n)
    other[series] = (other[series] or 0) + (n or 1)
end

local flowing = {}       -- apps whose bytes counted in flight since the last flush

--- Count n bytes of app `id` under `series` (its ratelimit_bytes_total) while its request is
-- still running: the node totals list the app from the next flush on, although none of its
-- requests has ended yet (a first download that runs for minutes).
function _M.flow(series, id, n)
    other[series] = (other[series] or 0) + n
    flowing[id] = true
end

local function add(key, n)
    if n ~= 0 then
        mdict:incr(key, n, 0)
    end
end

local function flush_hist(name, buckets, b, sum, n)
    if n == 0 then
        return
    end
    for i = 1, #buckets + 1 do
        add(name .. "\0" .. i, b[i])
        b[i] = 0
    end
    add(name .. "\0sum", sum)
    add(name .. "\0count", n)
end

-- cumulative node totals of the node report (keys with \0 are never rendered)
local NODE_REQ, NODE_BLK = "node\0req\0", "node\0blk\0"
local FLUSHES = "flushes\0"     -- + worker id: flushes finished (not a series: it holds a \0)
local NOT_APPS = { _invalid = true, _unknown = true, _unconfigured = true }
-- a queue of the apps whose node totals were created, each pushed once by the worker that
-- created them; the reporting worker drains it into its own list (node_totals)
local NODE_APPS = "node\0apps"

-- The accumulators keep their keys from one flush to the next (counts back to 0) rather than
-- starting as new tables: the request path's compiled code looks its counters up in them, and a
-- fresh table every second made the first request after each flush leave that code for a key
-- it had not seen (a side exit per worker and second; its side trace compiled only after ten,
-- mid-benchmark). At most KEEP_MAX keys are kept; beyond that a table starts again.
local KEEP_MAX = 10000
local req_n, other_n = 0, 0

-- series -> n of a table of counts: into the dict, and back to 0
local function flush_counts(t, prefix, suffix)
    for k, n in pairs(t) do
        if n ~= 0 then
            add(prefix and (prefix .. k .. suffix) or k, n)
            t[k] = 0
        end
    end
end

--- Move this worker's accumulators into the shared dict.
local flush_helpers = { add, flush_hist, flush_counts }
function _M.flush()
    local total, blk_total = 0, 0
    local napps = 0
    for app, ms in pairs(req) do
        napps = napps + 1
        local n_app, blk = 0, extra_blocked[app] or 0
        extra_blocked[app] = nil
        for method, ss in pairs(ms) do
            for status, n in pairs(ss) do
                if n ~= 0 then
                    add(format('ratelimit_requests_total{app_id="%s",method="%s",status="%d"}',
                        app, method, status), n)
                    ss[status] = 0
                    n_app = n_app + n
                    if status == 429 then
                        blk = blk + n
                    end
                end
            end
        end
        if n_app ~= 0 or blk ~= 0 then
            if mdict:add(NODE_REQ .. app, 0) and not NOT_APPS[app] then
                mdict:rpush(NODE_APPS, app)     -- its first total: the report's list learns it
            end
            add(NODE_REQ .. app, n_app)
            add(NODE_BLK .. app, blk)
            total, blk_total = total + n_app, blk_total + blk
        end
    end
    for app in pairs(flowing) do              -- bytes of requests not yet logged
        if mdict:add(NODE_REQ .. app, 0) and not NOT_APPS[app] then
            mdict:rpush(NODE_APPS, app)
        end
        flowing[app] = nil
    end
    for app, n in pairs(extra_blocked) do     -- refusals whose request is not yet logged
        add(NODE_BLK .. app, n)
        blk_total = blk_total + n
    end
    extra_blocked = {}
    add(NODE_REQ, total)
    add(NODE_BLK, blk_total)
    req_n = napps
    if req_n > KEEP_MAX then
        req, req_n = {}, 0
    end
    flush_hist("ratelimit_request_cost", COST_BUCKETS, cost_b, cost_sum, cost_n)
    cost_sum, cost_n = 0, 0
    flush_hist("ratelimit_redis_latency_seconds", LATENCY_BUCKETS, lat_b, lat_sum, lat_n)
    lat_sum, lat_n = 0, 0
    flush_hist("connlimit_duration_seconds", CONN_BUCKETS, conn_b, conn_sum, conn_n)
    conn_sum, conn_n = 0, 0
    add("ratelimit_l3_hits_total", hits)
    add("ratelimit_l3_misses_total", misses)
    hits, misses = 0, 0
    other_n = 0
    for _ in pairs(other) do
        other_n = other_n + 1
    end
    flush_counts(other)
    if other_n > KEEP_MAX then
        other = {}
    end
    flush_counts(ops_n, 'ratelimit_s3_operations_total{operation="', '"}')
    flush_counts(ops_cost, 'ratelimit_s3_cost_total{operation="', '"}')
    -- after everything: a reader that sees this count grow knows the flush before it is in
    mdict:incr(FLUSHES .. ngx.worker.id(), 1, 0)
end

--- How many flushes each worker (0 .. count-1) has finished (tests wait on it before reading
-- a counter that must not have moved).
_M.TIMER_HELPERS = flush_helpers     -- run interpreted, as flush (tollgate.handler)

function _M.flushes()
    local out = {}
    for w = 0, ngx.worker.count() - 1 do
        out[w + 1] = mdict:get(FLUSHES .. w) or 0
    end
    return out
end

local function fmt_num(v)
    if v == math.floor(v) and v < 1e15 and v > -1e15 then
        return format("%d", v)
    end
    return format("%.6g", v)
end

local function render_hist(out, name, buckets)
    local count = mdict:get(name .. "\0count")
    if not count then
        return
    end
    local cum = 0
    for i = 1, #buckets do
        cum = cum + (mdict:get(name .. "\0" .. i) or 0)
        out[#out + 1] = format('%s_bucket{le="%s"} %s', name, fmt_num(buckets[i]), fmt_num(cum))
    end
    cum = cum + (mdict:get(name .. "\0" .. (#buckets + 1)) or 0)
    out[#out + 1] = format('%s_bucket{le="+Inf"} %s', name, fmt_num(cum))
    out[#out + 1] = format("%s_sum %s", name, fmt_num(mdict:get(name .. "\0sum") or 0))
    out[#out + 1] = format("%s_count %s", name, fmt_num(count))
end

--- Prometheus text of everything in the dict plus `gauges` ({series = value}) and the gauges
-- of every source (add_gauges).
function _M.render(gauges)
    _M.flush()
    gauges["ratelimit_l3_cache_hit_ratio"] = _M.hit_ratio()
    for i = 1, #ZONES do
        local z = ngx.shared[ZONES[i]]
        if z and z.capacity then
            local label = '{zone="' .. ZONES[i] .. '"}'
            gauges["ratelimit_shm_capacity_bytes" .. label] = z:capacity()
            gauges["ratelimit_shm_free_bytes" .. label] = z:free_space()
        end
    end
    for i = 1, #gauge_sources do
        gauge_sources[i](gauges)
    end
    local series = {}
    for _, k in ipairs(mdict:get_keys(0)) do
        if not find(k, "\0", 1, true) then
            series[#series + 1] = k
        end
    end
    for k in pairs(gauges) do
        series[#series + 1] = k
    end
    sort(series)
    local out, last, described = {}, nil, {}
    local function header(name)
        if name ~= last then
            local h = HELP[name]
            if h then
                out[#out + 1] = "# HELP " .. name .. " " .. h[2]
                out[#out + 1] = "# TYPE " .. name .. " " .. h[1]
            end
            last = name
            described[name] = true
        end
    end
    for _, k in ipairs(series) do
        local brace = find(k, "{", 1, true)
        header(brace and sub(k, 1, brace - 1) or k)
        local v = gauges[k] or mdict:get(k) or 0
        out[#out + 1] = k .. " " .. fmt_num(v)
    end
    -- the S3 families are described before their first sample, so that a scraper (or a test)
    -- sees that this gateway counts S3 operations
    for _, name in ipairs(ALWAYS_DESCRIBED) do
        if not described[name] then
            last = nil
            header(name)
        end
    end
    for _, h in ipairs({ { "ratelimit_request_cost", COST_BUCKETS },
                         { "ratelimit_redis_latency_seconds", LATENCY_BUCKETS },
                         { "connlimit_duration_seconds", CONN_BUCKETS } }) do
        last = nil
        header(h[1])
        render_hist(out, h[1], h[2])
    end
    out[#out + 1] = ""
    return concat(out, "\n")
end

--- Cumulative totals of this node since it started: requests, blocked, {app = {requests,
-- blocked, bytes_in, bytes_out}} (apps only, not the "_invalid"/"_unknown"/"_unconfigured"
-- labels). The bytes are the app's ratelimit_bytes_total series as flushed (read, never
-- written here: the request path's count is the metric's own); 0 is left out of the report.
-- The apps with node totals, known to the reporting worker: listed from the dict once per worker
-- start (a worker started by a reload finds the totals of its predecessors), then learnt from the
-- queue the flushes fill — no walk of the dict on the report's timer.
local node_apps
local bytes_series = {}   -- app -> {in series, out series} (built once per app and worker)

local function bytes_of(app)
    local ks = bytes_series[app]
    if not ks then
        ks = { 'ratelimit_bytes_total{app_id="' .. app .. '",direction="in"}',
               'ratelimit_bytes_total{app_id="' .. app .. '",direction="out"}' }
        bytes_series[app] = ks
    end
    local bin, bout = mdict:get(ks[1]), mdict:get(ks[2])
    return bin ~= 0 and bin or nil, bout ~= 0 and bout or nil
end

function _M.node_totals()
    if not node_apps then
        node_apps = {}
        local lr = #NODE_REQ
        for _, k in ipairs(mdict:get_keys(0)) do   -- once per worker start
            local app = sub(k, lr + 1)
            if sub(k, 1, lr) == NODE_REQ and app ~= "" and not NOT_APPS[app] then
                node_apps[app] = true
            end
        end
    end
    for _ = 1, 100000 do
        local app = mdict:lpop(NODE_APPS)
        if not app then
            break
        end
        node_apps[app] = true
    end
    local apps = {}
    for app in pairs(node_apps) do
        local n = mdict:get(NODE_REQ .. app)
        if n then
            local bin, bout = bytes_of(app)
            apps[app] = { requests = n, blocked = mdict:get(NODE_BLK .. app) or 0,
                          bytes_in = bin, bytes_out = bout }
        else
            node_apps[app] = nil    -- the dict evicted it (a full zone): pushed again if it returns
            bytes_series[app] = nil
        end
    end
    return mdict:get(NODE_REQ) or 0, mdict:get(NODE_BLK) or 0, apps
end

--- Local hit ratio of this node from the flushed counters.
function _M.hit_ratio()
    local h = mdict:get("ratelimit_l3_hits_total") or 0
    local m = mdict:get("ratelimit_l3_misses_total") or 0
    if h + m == 0 then
        return 1
    end
    return h / (h + m)
end

return _M
