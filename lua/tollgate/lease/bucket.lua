-- L3: this node's lease of an app's tokens (Req 2, 13; Properties 2, 8, 10, 12).
-- Hot path: one atomic decrement of the lease plus two counters, all in the shared dict.
-- Redis is reached only when the lease is empty (synchronously, under the operation timeout)
-- or below 20 % of the reserve target (asynchronously, single-flight per app and node).
local shm = require("tollgate.shm")
local scripts = require("tollgate.redis.scripts")
local metrics = require("tollgate.metrics")
local deg = require("tollgate.redis.degradation")
local active = require("tollgate.lease.active")
local sync = require("tollgate.lease.sync")
local cfgcache = require("tollgate.config.cache")

local dict = shm.dict
local K = shm.keys
local take = shm.take
local add_pending = shm.add_pending
local now = ngx.now
local timer_at = ngx.timer.at
local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local format = string.format
local floor = math.floor
local random = math.random

local _M = {}

-- the gateway's settings, its Redis client and the loaded scripts (init)
local conf, redis_client, redis_scripts

function _M.init(settings, client, script_set)
    conf, redis_client, redis_scripts = settings, client, script_set
end

-- the /metrics gauges of this node's leases: the apps with local state (not every app)
metrics.add_gauges(function(gauges)
    gauges["ratelimit_sync_apps_visited"] = dict:get("sync:visited") or 0
    for _, id in ipairs(active.list()) do
        local k = K(id)
        local t = dict:get(k.tokens)
        if t then
            gauges['ratelimit_l3_tokens{app_id="' .. id .. '"}'] = t
            gauges['ratelimit_l3_debt{app_id="' .. id .. '"}'] = dict:get(k.debt) or 0
            gauges['ratelimit_l3_reserve_target{app_id="' .. id .. '"}'] =
                dict:get(k.target) or conf.min_target
        end
    end
end)

local function count_error(err)
    metrics.inc(deg.is_open() and 'ratelimit_redis_errors_total{kind="unavailable"}'
        or 'ratelimit_redis_errors_total{kind="reply"}')
    return err
end

-- L2 grant for app `a`: returns the script reply table, or nil, err. Every grant carries an id;
-- `lost` is the id of an earlier grant whose reply never came (a timeout while Redis applied
-- it): L2 hands its amount back as reply[8] and grant() adds it to the lease. `reserve` is the
-- part of `want` beyond what the node needs now: L2 cuts it to the node's share of the burst
-- among the app's active nodes as it counts them at this grant.
local function run_grant(red, a, want, min, gid, lost, reserve)
    return scripts.run(red, redis_scripts.l2_grant, 6, a.k_l2, a.k_leases, a.k_nodes, a.k_l1,
        a.k_active, a.k_debtors, conf.node_id,
        format("%d", want), format("%d", min), "", gid, lost or "", format("%d", reserve))
end

local credit

local function grant(a, want, min, timeout_ms, reserve)
    metrics.inc('ratelimit_redis_calls_total{op="grant"}')
    local k = K(a.id)
    local gk = k.grant_id or ("app:" .. a.id .. ":grant_id")   -- slow path only: no hit pays it
    local lk = k.lost_grant or ("app:" .. a.id .. ":lost_grant")
    k.grant_id, k.lost_grant = gk, lk
    local gid = format("%d", dict:incr(gk, 1, floor(now() * 1000) * 1000))
    local lost = dict:get(lk)
    local res, err = redis_client:with(timeout_ms, run_grant, a, want, min, gid, lost,
        reserve or 0)
    if not res then
        dict:set(lk, gid)   -- applied or not: the next grant asks (L2 knows its last one)
        return nil, err
    end
    if lost then
        dict:delete(lk)
        local rec = tonumber(res[8]) or 0
        if rec > 0 then
            credit(k, rec)
            metrics.inc("ratelimit_recovered_grant_tokens_total", rec)
        end
    end
    return res
end
_M.grant = grant

-- Pay local debt first, then add the rest of a grant to the lease; returns the tokens added.
credit = function(k, granted)
    local pay = take(k.debt, granted, dict)
    local rest = granted - pay
    if rest > 0 then
        dict:incr(k.tokens, rest, 0)
    end
    active.mark(k.id)   -- the node holds a lease of the app: the timers visit it
    return rest
end

-- The reserve target: worker 0's adaptive value, or before its first tick the level's minimum
-- capped at a fair share of the burst (as sync.target() caps it), so a fresh node never asks
-- for more than its share.
local function target_of(a, k)
    local t = dict:get(k.target)
    if t then
        return t
    end
    local nodes = dict:get(k.nodes) or 1
    local share = a.burst / (2 * (nodes > 0 and nodes or 1))
    t = deg.reserve_min()
    return t < share and t or floor(share)
end

-- The target as the hit path sees it: read at most every 100 ms per worker (worker 0 changes it
-- once per sync interval, 100 ms by default) and kept on the app's config table, so that a hit
-- does not pay a shared-dict read only to learn that no refill is due. A refill timer and every
-- grant read the target itself.
local TARGET_TTL = 0.1

local function hit_target(a, k)
    local t = now()
    if t < (a.l3_target_until or 0) then
        return a.l3_target
    end
    local v = target_of(a, k)
    a.l3_target, a.l3_target_until = v, t + TARGET_TTL
    return v
end

-- Remember what a grant said about L2: the number of active nodes, and scarcity — it granted
-- less than asked (beyond the cut of the reserve to the node's share, reply[9]), or it left L2
-- with less than a quarter of the burst (the app spends its burst: a node that seldom grants,
-- with little traffic of the app, must not keep a reserve the busy nodes need).
local function note_grant(k, res, want)
    local asked = res[9] or want
    if res[1] < asked or res[2] * 4 < res[4] then
        dict:set(k.scarce, true, 2)
    end
    dict:set(k.nodes, res[6], 10)
end

local function refill_timer(premature, a)
    local k = K(a.id)
    if premature then
        dict:delete(k.refill_lock)
        return
    end
    local tokens = dict:get(k.tokens) or 0
    local reserve = floor(target_of(a, k) - tokens)
    local want = reserve + floor(dict:get(k.debt) or 0)
    if want > 0 then
        local res, err = grant(a, want, 1, conf.bg_timeout_ms, reserve > 0 and reserve or 0)
        if res then
            if res[1] > 0 then
                credit(k, res[1])
            end
            note_grant(k, res, want)
        else
            count_error(err)
            log(WARN, "tollgate: async refill of ", a.id, " failed: ", err)
        end
    end
    dict:delete(k.refill_lock)
end

_M.TIMER_HELPERS = { refill_timer }     -- run interpreted (tollgate.handler)

--- Start an asynchronous refill of app `a` unless one is already running on this node.
function _M.trigger_refill(a, k)
    if not deg.allow_background() or not dict:add(k.refill_lock, true, 5) then
        return
    end
    local ok, err = timer_at(0, refill_timer, a)
    if not ok then
        dict:delete(k.refill_lock)
        log(ERR, "tollgate: cannot start refill timer: ", err)
    end
end

-- The fail-open budget of app `a` on this node, tokens per second: fail_open_rate, but never
-- more than the node's share of the app's guaranteed rate (over its active nodes as L2 last
-- counted them), so that the nodes failing open together admit at most the guarantee.
local function fail_open_budget(a, k)
    local b = conf.fail_open_rate
    local g = a.guaranteed
    if g then
        local nodes = dict:get(k.nodes) or 1
        local share = floor(g / (nodes > 0 and nodes or 1))
        if share < 1 then
            share = 1
        end
        if share < b then
            b = share
        end
    end
    return b
end

-- Admit `cost` from the fail-open budget (fail_open_budget() tokens per second per app and node).
-- A request costlier than the whole budget is admitted when the second's budget is untouched
-- and takes all of it: the budget limits admissions, while the fail-open consumption (reported
-- to L2 when Redis is back, where it is paid like any consumption) counts the full cost, which
-- the log phase settles against the bytes that moved.
local function fail_open(a, k, cost)
    local rate = fail_open_budget(a, k)
    local window = cost < rate and cost or rate
    local sec_key = k.fail_open .. ":" .. floor(now())
    local v = dict:incr(sec_key, window, 0, 2)
    if v and v <= rate and window > 0 then
        if dict:incr(k.fail_open, cost, 0) == cost then
            active.mark(a.id)   -- the first unreported fail-open admission
        end
        metrics.inc('ratelimit_fail_open_total{app_id="' .. a.id .. '"}')
        return true, rate - v, "fail_open"
    end
    if v then
        dict:incr(sec_key, -window)
    end
    return false, "fail_open_exhausted", { reset = floor(now()) + 1, remaining = 0 }
end
_M.fail_open = fail_open

-- Seconds until L2 can cover `deficit` at `rate` tokens/s.
local function wait_for(deficit, rate)
    if deficit <= 0 then
        return 0
    end
    if rate <= 0 then
        return 60
    end
    return deficit / rate
end

-- L2 could not cover `need`: refuse, and remember the refusal on this node for a short while —
-- only for requests that need at least as much (a huge request refused says nothing about a
-- small one: one request never locks the whole app out). The wait is the real time the app's
-- refill needs to afford `cost` and the local debt beyond what the lease and L2 hold, at the
-- rate L2 reported, at most retry_after_max.
local function exhausted(k, res, need, cost)
    local rate = res[3] / 1000
    local deficit = cost + (dict:get(k.debt) or 0) - (dict:get(k.tokens) or 0) - res[2]
    local secs = wait_for(deficit, rate)
    if secs > conf.retry_after_max then
        secs = conf.retry_after_max
    end
    local reset = now() + secs
    local reason = res[5]
    if reason == "ok" then
        reason = "app_exhausted" -- granted less than this request needs
    end
    if deficit <= 0 and reason == "app_exhausted" then
        -- L2 holds what the request needs: it lost a contended lease, nothing to remember
        return false, reason, { reset = reset, remaining = 0 }
    end
    local ttl = secs
    if ttl < conf.neg_cache_min then
        ttl = conf.neg_cache_min
    elseif ttl > conf.neg_cache_max then
        ttl = conf.neg_cache_max
    end
    dict:set(k.neg, reset, ttl)
    dict:set(k.neg_need, need, ttl)
    dict:set(k.neg_reason, reason, ttl)
    return false, reason, { reset = reset, remaining = 0 }
end

local function admit(k, cost, v)
    return v, add_pending(k, cost, 1)
end

-- Take `cost` from the lease, waiting (a few ms at most) for an asynchronous refill of this
-- node that is still on its way (at most 10 ms: within the timeout budget's 20 ms margin).
local function lease_after_refill(k, cost)
    for _ = 1, 5 do
        local ok, v = shm.take_all_or_nothing(k.tokens, cost)
        if ok or not dict:get(k.refill_lock) then
            return ok, v
        end
        ngx.sleep(0.002)
    end
    return shm.take_all_or_nothing(k.tokens, cost)
end

-- The lease is empty: ask L2 for this request plus a reserve, under the operation timeout.
-- A node that does not know how many nodes share the app (its first grant of the app, or none
-- for 10 s) asks for the request alone: a reserve sized for one node, taken by each of many
-- nodes starting together, would empty L2 for the rest of them (refused while the app is under
-- its quota). The reply says how many share it; an asynchronous refill then takes the reserve.
local function slow_acquire(a, k, cost, again)
    local debt = dict:get(k.debt) or 0
    local need = cost + debt
    local reset = dict:get(k.neg)
    -- (a remembered refusal lives at least neg_cache_min: past its reset it refuses nothing)
    if reset and reset > now() and need >= (dict:get(k.neg_need) or 0) then
        return false, dict:get(k.neg_reason) or "app_exhausted", { reset = reset, remaining = 0 }
    end
    if not deg.allow_request() then
        return fail_open(a, k, cost)
    end
    local first = dict:get(k.nodes) == nil
    local reserve = first and 0 or floor(target_of(a, k))
    local want = floor(need) + reserve
    -- what L2 must add to the lease, never more than a full bucket holds: a request costlier
    -- than the burst (the access phase caps its up-front charge at the burst) is admitted when
    -- the bucket is full, and debt above the burst is paid a full bucket at a time
    local min = need - (dict:get(k.tokens) or 0)
    if min > a.burst then
        min = a.burst
    end
    if min < 1 then
        min = 1
    end
    local res, err = grant(a, want, min, conf.op_timeout_ms, reserve)
    if not res then
        count_error(err)
        return fail_open(a, k, cost)
    end
    if res[5] == "unknown_app" then
        -- the gateway knows the app but Redis lost its state: not the client's fault (while the
        -- whole config store is lost, config logged that once: no line per request)
        if not cfgcache.store_lost() then
            log(ERR, "tollgate: L2 state of ", a.id, " missing in Redis, failing open")
        end
        return fail_open(a, k, cost)
    end
    if res[5] == "app_disabled" then
        return false, "app_disabled", { remaining = 0 }
    end
    note_grant(k, res, want)
    if first and res[1] > 0 then
        _M.trigger_refill(a, k)   -- the reserve, sized by the node count L2 just gave
    end
    local granted = res[1]
    if granted <= 0 then
        -- an asynchronous refill may have taken what L2 had for this node: use it, not a 429
        local ok, v = lease_after_refill(k, cost)
        if ok then
            admit(k, cost, v)
            return true, v
        end
        return exhausted(k, res, need, cost)
    end
    local rest = credit(k, granted)
    if rest >= cost then
        local v = dict:incr(k.tokens, -cost, 0)
        if v and v >= 0 then
            local _, n = admit(k, cost, v)
            if n >= conf.batch_threshold then
                sync.trigger(a)
            end
            return true, v
        end
        dict:incr(k.tokens, cost)
    end
    -- concurrent requests took what we were granted: the lease is contended, try it once more
    -- (after the node's refill on its way, if one is)
    local ok, v = lease_after_refill(k, cost)
    if ok then
        admit(k, cost, v)
        return true, v
    end
    again = again or 0
    if again < 3 and res[2] >= need then
        -- L2 holds enough: the node's concurrent requests shared out a grant sized for one of
        -- them (a first grant carries no reserve, a scarce app's a small one); another grant,
        -- with the node's reserve (at most three more round trips)
        return slow_acquire(a, k, cost, again + 1)
    end
    return exhausted(k, res, need, cost)
end

-- Remote mode (benchmark baseline): one L2 call per request, no lease.
local function remote_acquire(a, k, cost)
    if not deg.allow_request() then
        return fail_open(a, k, cost)
    end
    local res, err = grant(a, cost, cost, conf.op_timeout_ms)
    if not res then
        count_error(err)
        return fail_open(a, k, cost)
    end
    if res[1] >= cost then
        active.mark(a.id)   -- its connection statistics (a Redis call per request anyway)
        return true, res[2]
    end
    return false, "app_exhausted", { reset = now() + wait_for(cost - res[2], res[3] / 1000),
                                     remaining = res[2] }
end

--- Charge `cost` to app `a` (config table). Returns
--   true, remaining[, "fail_open"]   admitted
--   false, reason, info              rejected ({reset = epoch seconds, remaining = n})
function _M.acquire(a, cost)
    local k = K(a.id)
    if conf.mode == "remote" then
        return remote_acquire(a, k, cost)
    end
    local v = dict:incr(k.tokens, -cost, 0)
    if v and v >= 0 then
        metrics.hit()
        if add_pending(k, cost, 1) >= conf.batch_threshold then
            sync.trigger(a)
        end
        if v < hit_target(a, k) * conf.refill_threshold then
            _M.trigger_refill(a, k)
        end
        return true, v
    end
    if v then
        dict:incr(k.tokens, cost)
    end
    metrics.miss()
    return slow_acquire(a, k, cost)
end

--- Charge after the response (download bandwidth, chunked upload bytes). Never drives the
-- lease negative (Property 10): what it cannot cover becomes local debt paid by the next grant.
function _M.charge(a, amount, source)
    if amount <= 0 then
        return
    end
    local k = K(a.id)
    if source == "fail_open" then
        dict:incr(k.fail_open, amount, 0)
        return
    end
    if conf.mode == "remote" then
        return
    end
    local took = take(k.tokens, amount)
    dict:incr(k.pending_cost, amount, 0)
    if took < amount then
        dict:incr(k.debt, amount - took, 0)
        active.mark(a.id)   -- local debt (the lease may be gone): reported and paid later
    end
end

--- Charge `amount` tokens of a transfer while its bytes move (tollgate.request.pace): from the
-- lease, or for a request admitted in fail-open from this second's fail-open budget; all or
-- nothing and never waiting for Redis (a body filter cannot). Returns true, tokens left — or
-- false when the lease cannot pay (an asynchronous refill is started; the caller paces).
function _M.pay(a, amount, source)
    local k = K(a.id)
    if source == "fail_open" then
        local rate = fail_open_budget(a, k)
        local sec_key = k.fail_open .. ":" .. floor(now())
        local v = dict:incr(sec_key, amount, 0, 2)
        if v and v <= rate then
            dict:incr(k.fail_open, amount, 0)
            return true, rate - v
        end
        if v then
            dict:incr(sec_key, -amount)
        end
        return false
    end
    if conf.mode == "remote" then
        return true, 0      -- no lease: the log phase settles what moved
    end
    local ok, v = shm.take_all_or_nothing(k.tokens, amount)
    if ok then
        add_pending(k, amount, 0)
        if v < hit_target(a, k) * conf.refill_threshold then
            _M.trigger_refill(a, k)
        end
        return true, v
    end
    _M.trigger_refill(a, k)
    return false
end

--- Give `amount` back to the lease: an estimate that was too high (the request itself stays
-- counted).
function _M.refund(a, amount, source)
    if amount <= 0 then
        return
    end
    local k = K(a.id)
    if source == "fail_open" then
        dict:incr(k.fail_open, -amount, 0)
        -- and to this second's budget, which admitted the estimate (never below zero)
        take(k.fail_open .. ":" .. floor(now()), amount)
    elseif conf.mode ~= "remote" then
        dict:incr(k.tokens, amount, 0)
        dict:incr(k.pending_cost, -amount, 0)
    end
    active.mark(a.id)
end

--- Return the charge of a cancelled request to the lease (Req 13, Property 8).
function _M.rollback(a, cost, source)
    local k = K(a.id)
    if source == "fail_open" then
        dict:incr(k.fail_open, -cost, 0)
    elseif conf.mode ~= "remote" then
        dict:incr(k.tokens, cost, 0)
        add_pending(k, -cost, -1)
    end
    active.mark(a.id)
    dict:incr(k.rollback_count, 1, 0)
    metrics.inc('ratelimit_rollbacks_total{app_id="' .. a.id .. '"}')
    log(ngx.INFO, "tollgate: rolled back ", cost, " tokens of ", a.id)
end

--- Seconds (fractional) until a rejected request can be afforded: the real wait (the deficit
-- at the app's refill rate, at most retry_after_max) plus a small positive jitter, so that
-- clients refused together do not all come back at once and none comes back early. The
-- response sends it as Retry-After (whole seconds, rounded up) and x-amz-retry-after (ms).
function _M.retry_after(info)
    local secs = (info.reset or now()) - now()
    if secs < 0 then
        secs = 0
    elseif secs > conf.retry_after_max then
        secs = conf.retry_after_max
    end
    return secs * (1 + 0.1 * random()) + 0.001 + 0.01 * random()
end

return _M
