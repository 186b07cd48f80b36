-- Consumption reports and lease upkeep (Req 2.5, docs/design.md §3). Worker 0 ticks every sync
-- interval: it reports each app's pending consumption, adapts the reserve target to the app's
-- rate on this node, and returns the tokens of idle leases to L2. Any worker reports an app
-- early once 1000 requests are pending. A report carries (node, seq): Redis applies it at most
-- once, and an unacknowledged report is kept and resent — never dropped.
local shm = require("tollgate.shm")
local scripts = require("tollgate.redis.scripts")
local metrics = require("tollgate.metrics")
local cfgcache = require("tollgate.config.cache")
local deg = require("tollgate.redis.degradation")
local emergency = require("tollgate.lease.emergency")
local active = require("tollgate.lease.active")
local conn_dict = ngx.shared.connlimit_dict   -- the requests in flight per app, ca:<app>

local dict = shm.dict
local K = shm.keys
local now = ngx.now
local timer_at = ngx.timer.at
local log = ngx.log
local WARN = ngx.WARN
local format = string.format
local floor = math.floor

local _M = {}

local conf, redis_client, redis_scripts
local HEARTBEAT = 5        -- seconds between reports of an app with a lease but no traffic
local EWMA = 0.3

local state = {}           -- worker 0: per app {rate, last_total, last_active, last_report}

function _M.init(settings, client, script_set)
    conf, redis_client, redis_scripts = settings, client, script_set
end

local function seq_base()
    -- sequence numbers stay increasing across restarts of the node
    return floor(now() * 1000) * 1000
end

-- Build (or reuse) the report of app `a`. Returns the inflight string or nil if nothing to say.
local function prepare(a, k, returned, force)
    local inflight = dict:get(k.inflight)
    if inflight then
        return inflight
    end
    local pc, pn = shm.take_pending(k)
    local fo = dict:get(k.fail_open) or 0
    if pc == 0 and pn == 0 and fo == 0 and returned == 0 and not force then
        return nil
    end
    if fo ~= 0 then
        dict:incr(k.fail_open, -fo)
    end
    local held = (dict:get(k.tokens) or 0) - (dict:get(k.debt) or 0)
    local seq = dict:incr(k.seq, 1, seq_base())
    inflight = format("%d %d %d %d %d %d", seq, pc, pn, returned, held, fo)
    local ok, err = dict:safe_set(k.inflight, inflight)
    if not ok then
        log(ngx.ERR, "tollgate: cannot keep report of ", a.id, ": ", err)
    end
    dict:incr(k.reported, pc, 0)
    return inflight
end

-- Send one prepared report on connection red. Returns true when Redis has it.
local function send(red, a, k, inflight)
    local seq, pc, pn, ret, held, fo =
        inflight:match("^(%d+) (%-?%d+) (%-?%d+) (%d+) (%-?%d+) (%-?%d+)$")
    metrics.inc('ratelimit_redis_calls_total{op="report"}')
    local res, err = scripts.run(red, redis_scripts.l3_report, 6, a.k_l2, a.k_leases, a.k_stats,
        a.k_nodes, a.k_active, a.k_totals,
        conf.node_id, seq, pc, pn, ret, held, fo)
    if not res then
        return nil, err
    end
    dict:delete(k.inflight)
    if res[1] == 1 then
        metrics.inc('ratelimit_reports_total{result="applied"}')
    elseif res[3] == "unknown_app" then
        metrics.inc('ratelimit_reports_total{result="unknown_app"}')
    else
        metrics.inc('ratelimit_reports_total{result="duplicate"}')
    end
    return true
end

local function send_batch(red, batch)
    for i = 1, #batch do
        local b = batch[i]
        local ok, serr = send(red, b[1], b[2], b[3])
        if not ok then
            return nil, serr
        end
    end
    return true
end

-- Report apps (list of {a, k, inflight}) on one connection.
local function send_all(batch)
    if #batch == 0 then
        return true
    end
    local _, err = redis_client:with(conf.bg_timeout_ms, send_batch, batch)
    if err then
        metrics.inc('ratelimit_reports_total{result="failed"}')
        log(WARN, "tollgate: consumption report failed, kept for retry: ", err)
        return nil, err
    end
    return true
end

local function report_timer(premature, a)
    local k = K(a.id)
    if not premature then
        local inflight = prepare(a, k, 0, false)
        if inflight then
            send_all({ { a, k, inflight } })
        end
    end
    dict:delete(k.sync_lock)
end

--- Report app `a` now (batch threshold reached), unless a report of it is under way.
function _M.trigger(a)
    local k = K(a.id)
    if not dict:add(k.sync_lock, true, 5) then
        return
    end
    local ok, err = timer_at(0, report_timer, a)
    if not ok then
        dict:delete(k.sync_lock)
        log(ngx.ERR, "tollgate: cannot start report timer: ", err)
    end
end

-- Reserve target of an app on this node: ~target_horizon of its traffic, at least min_target
-- unless L2 is scarce, and at most a fair share of the burst among the app's active nodes.
function _M.target(rate, scarce, burst, nodes)
    local t = rate * conf.target_horizon
    local floor_target = deg.reserve_min()
    if not scarce and t < floor_target then
        t = floor_target
    end
    local cap = burst / (2 * (nodes > 0 and nodes or 1))
    if t > cap then
        t = cap
    end
    if t > conf.max_target then
        t = conf.max_target
    end
    if t < 1 then
        t = 1
    end
    return floor(t)
end

-- Upkeep of one app in worker 0's tick; returns a batch entry if a report is due.
local function upkeep(a, t, dt)
    local k = K(a.id)
    local st = state[a.id]
    local total = (dict:get(k.reported) or 0) + shm.peek_pending(k)
    if not st then
        st = { rate = 0, last_total = total, last_active = t, last_report = 0 }
        state[a.id] = st
    end
    local delta = total - st.last_total
    st.last_total = total
    if delta ~= 0 then
        st.last_active = t
    end
    st.rate = st.rate + EWMA * (delta / dt - st.rate)
    local scarce = dict:get(k.scarce) ~= nil
    local target = _M.target(st.rate, scarce, a.burst, dict:get(k.nodes) or 1)
    if dict:get(a.k_em) then
        target = floor(target * emergency.ratio(a.priority))
    end
    dict:set(k.target, target)

    if not dict:add(k.sync_lock, true, 5) then
        return nil
    end
    local returned = 0
    if not dict:get(k.inflight) and not deg.is_open() then
        local gb = dict:get(k.give_back) or 0
        if gb > 0 then
            dict:incr(k.give_back, -gb)
            returned = gb
        end
        local tokens = dict:get(k.tokens) or 0
        if tokens > 0 and t - st.last_active >= conf.idle_return_after then
            returned = returned + shm.take(k.tokens, tokens)           -- idle lease to L2
        elseif scarce and tokens > 2 * target then
            returned = returned + shm.take(k.tokens, tokens - target)  -- scarce app: no hoarding
        end
    end
    local held = dict:get(k.tokens) or 0
    if returned == 0 and t - st.last_report < deg.sync_interval() - conf.sync_interval / 2 then
        dict:delete(k.sync_lock)   -- not due at this degradation level
        return nil
    end
    local force = (held > 0 or returned > 0) and t - st.last_report >= HEARTBEAT
    local inflight = prepare(a, k, returned, force)
    if returned > 0 then
        metrics.inc("ratelimit_returned_tokens_total", returned)
    end
    if not inflight then
        dict:delete(k.sync_lock)
        return nil
    end
    st.last_report = t
    return { a, k, inflight }
end

local function pending_zero(k)
    local c, n = shm.peek_pending(k)
    return c == 0 and n == 0
end

-- An app leaves the active set once it has had no traffic for a while and nothing of it is
-- left to report: its lease returned, every report acknowledged, no request in flight. (Local
-- debt stays in the dict and is paid by the app's next grant, which makes it join again.)
local function forgettable(k)
    return (dict:get(k.tokens) or 0) == 0 and not dict:get(k.inflight)
        and (conn_dict:get("ca:" .. k.id) or 0) == 0
        and (dict:get(k.give_back) or 0) == 0 and (dict:get(k.fail_open) or 0) == 0
        and pending_zero(k)
end

local last_tick = nil

-- One tick's visit of an app (active.each). The tick's values live in these locals rather than
-- in a closure created per tick and another per quiet app: creating and closing closures is
-- code LuaJIT does not compile ("NYI: bytecode 51/50"), and its aborts in this timer, entered
-- through side exits of the traces it shares with the request path (the shared-dict calls),
-- made the request path's compiled traces differ from run to run.
local tick_t, tick_dt, tick_quiet, tick_batch, tick_visited = 0, 0, 0, nil, 0

local function visit(id)
    tick_visited = tick_visited + 1
    local a = cfgcache.app(id)
    if not a then
        return
    end
    local t = tick_t
    local b = upkeep(a, t, tick_dt)
    if b then
        tick_batch[#tick_batch + 1] = b
        return
    end
    local st = state[id]
    if st and t - st.last_active >= tick_quiet and t - st.last_report >= HEARTBEAT then
        if active.forget(id, forgettable, K(id)) then
            state[id] = nil
        end
    end
end

--- One tick of worker 0: upkeep of every app with local state on this node (tollgate.lease.
--- active: the work follows the apps with traffic here, not the configured apps), then their
--- reports on one connection.
function _M.tick()
    ngx.update_time()
    local t = now()
    local dt = last_tick and (t - last_tick) or conf.sync_interval
    if dt <= 0 then
        dt = conf.sync_interval
    end
    last_tick = t
    local batch = {}
    tick_t, tick_dt, tick_batch, tick_visited = t, dt, batch, 0
    tick_quiet = conf.idle_return_after + HEARTBEAT
    active.each(visit)
    tick_batch = nil
    dict:set("sync:visited", tick_visited)
    if #batch > 0 and deg.allow_background() then
        send_all(batch)
    end
    for i = 1, #batch do
        dict:delete(batch[i][2].sync_lock)
    end
end

-- Orderly stop (nginx -s quit, -s stop after its grace, a reload): what this node holds of an
-- app goes back to L2 before the worker exits. Under the app's sync lock (no tick or report of
-- another worker in between): an unacknowledged report is sent first; local debt is paid from
-- L2 by a grant (as the next grant would have paid it); then the pending consumption and the
-- whole lease, as returned tokens, go in one report. Returns true when Redis has it all.
local function flush_app(red, a, k)
    local inflight = dict:get(k.inflight)
    if inflight then
        local ok, err = send(red, a, k, inflight)
        if not ok then
            return nil, err
        end
    end
    local debt = dict:get(k.debt) or 0
    if debt > 0 then
        metrics.inc('ratelimit_redis_calls_total{op="grant"}')
        local res, err = scripts.run(red, redis_scripts.l2_grant, 6, a.k_l2, a.k_leases, a.k_nodes,
            a.k_l1, a.k_active, a.k_debtors, conf.node_id, format("%d", debt), "1")
        if not res then
            return nil, err
        end
        local granted = res[1] or 0
        if granted > 0 then
            local pay = shm.take(k.debt, granted)
            if granted > pay then
                dict:incr(k.tokens, granted - pay, 0)
            end
        end
    end
    local returned = shm.take(k.tokens, dict:get(k.tokens) or 0)
    local gb = dict:get(k.give_back) or 0
    if gb > 0 then
        dict:incr(k.give_back, -gb)
    end
    inflight = prepare(a, k, returned, true)
    if returned > 0 then
        metrics.inc("ratelimit_returned_tokens_total", returned)
    end
    local ok, err = send(red, a, k, inflight)
    if not ok then
        return nil, err
    end
    local left = dict:get(k.debt) or 0
    if left > 0 then
        log(WARN, "tollgate: ", a.id, " leaves ", left, " tokens of local debt that L2 could not ",
            "pay at exit (reported as held below zero)")
    end
    return true
end

-- One pass of flush(): every app with local state whose lock this worker gets. Returns the
-- requests still in flight on the node (their log phase books consumption after this pass)
-- and whether an app was skipped or failed.
local function flush_pass()
    local ids = active.list()
    local locked, again, busy = {}, false, 0
    for i = 1, #ids do
        local k = K(ids[i])
        busy = busy + (conn_dict and conn_dict:get("ca:" .. ids[i]) or 0)
        if dict:add(k.sync_lock, true, 5) then
            locked[#locked + 1] = k
        else
            again = true   -- another worker is reporting it: next pass
        end
    end
    if #locked > 0 then
        local _, err = redis_client:with(conf.bg_timeout_ms, function(red)
            for i = 1, #locked do
                local k = locked[i]
                local a = cfgcache.app(k.id)
                if a then
                    local ok, ferr = flush_app(red, a, k)
                    if not ok then
                        return nil, ferr
                    end
                end
            end
            return true
        end)
        if err then
            again = true
            log(WARN, "tollgate: exit flush failed, retrying: ", err)
        end
    end
    for i = 1, #locked do
        dict:delete(locked[i].sync_lock)
    end
    return busy, again
end

local FLUSH_WAIT = 3   -- seconds a stopping worker waits for in-flight requests and Redis

--- The worker is stopping (a timer's premature run): report every app's unreported
--- consumption and local debt, and return its lease to L2; repeat while requests are still
--- in flight on the node (their log phase books more), at most FLUSH_WAIT seconds. Every
--- worker does it (the log phase of any worker may book consumption); the sync lock and
--- (node, seq) keep the reports exact.
function _M.flush()
    if not conf then
        return
    end
    ngx.update_time()
    local deadline = now() + FLUSH_WAIT
    while true do
        local busy, again = flush_pass()
        ngx.update_time()
        if (busy == 0 and not again) or now() >= deadline then
            return
        end
        ngx.sleep(0.02)
    end
end

function _M.rate(id)
    local st = state[id]
    return st and st.rate or 0
end

-- the timers' part runs in the interpreter (tollgate.handler, "interpreted"): its helpers too
_M.TIMER_HELPERS = { visit, upkeep, prepare, send, send_batch, send_all, forgettable,
                     pending_zero, flush_pass, flush_app, report_timer }

return _M
