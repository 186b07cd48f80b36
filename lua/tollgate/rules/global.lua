-- Rules with distribution "global": one limit across every node, through Redis
-- (redis-scripts/rule_acquire.lua). Like the tiers' leases, a node takes a small batch of a
-- counter's capacity and spends it locally, but a batch is only valid inside the window
-- (fixed), the sub-window (sliding) or the 100 ms (token bucket) it was granted for, so Redis'
-- count of each (sub-)window bounds what all nodes admit in it. Unused parts expire with it.
-- Redis is asked under the request timeout; when it cannot answer (breaker open, timeout,
-- error) the rule admits and the caller counts `fail_open`.
--
-- Cost per request: the node's batch lives in the tollgate_rules dict; each worker takes a
-- small slice of it at once (one incr) and spends the slice from a Lua table until the batch's
-- end, so most requests touch neither the dict nor Redis. Renewal is single-flight per
-- counter: one request (holding the gr: entry, added atomically) asks Redis; the others keep
-- spending what is left or, with nothing left, wait on the dict for its answer (never longer
-- than the Redis timeout) instead of all asking at once. A batch that runs low is topped up
-- early by one request, so the others rarely wait.
local scripts = require("tollgate.redis.scripts")
local metrics = require("tollgate.metrics")
local deg = require("tollgate.redis.degradation")

local dict = ngx.shared.tollgate_rules
local now = ngx.now
local update_time = ngx.update_time
local sleep = ngx.sleep
local floor = math.floor
local format = string.format
local log = ngx.log
local WARN = ngx.WARN

local _M = {}

local conf, redis_client, redis_scripts
local workers = 1

function _M.init(settings, client, script_set)
    conf, redis_client, redis_scripts = settings, client, script_set
    workers = ngx.worker.count() or 1
end

--- Whether the last acquire() yielded (Redis call or sleep): the caller's per-request facts
-- may have been overwritten by other requests of the worker meanwhile.
_M.yielded = false

-- units a node asks for beyond this request's: a twentieth of the limit (one call per 5 % of
-- the capacity), at most 1000
local function extra(r)
    local b = r.g_extra
    if not b then
        b = floor(r.limit / 20)
        if r.algorithm == "sliding_window" then
            b = floor(b / 4)       -- a batch lives one sub-window: keep it small
        end
        if b > 1000 then
            b = 1000
        end
        r.g_extra = b
        -- a worker's slice of a batch: a sixteenth of it per worker, at most 64
        local s = floor(b / (16 * workers))
        r.g_slice = s > 64 and 64 or s
    end
    return b
end

-- The state of counter (rule r, scope key skey), built once per worker and rule version:
-- {slice units, slice valid until, lease key strings gx gl gi gn gr gf, Redis key}.
local function counter(r, skey)
    local c = r.g_cache
    if not c then
        c = {}
        r.g_cache, r.g_n = c, 0
    end
    local ks = c[skey]
    if not ks then
        if r.g_n >= 10000 then
            c = {}
            r.g_cache, r.g_n = c, 0
        end
        local lk = r.id .. ":" .. skey
        ks = { 0, 0, "gx:" .. lk, "gl:" .. lk, "gi:" .. lk, "gn:" .. lk, "gr:" .. lk,
               "gf:" .. lk, r.k_global .. skey }
        c[skey] = ks
        r.g_n = r.g_n + 1
    end
    return ks
end
_M.counter = counter

local function run(red, r, rkey, want, min)
    return scripts.run(red, redis_scripts.rule_acquire, 1, rkey, r.algorithm, r.limit, r.window,
        r.burst or 0, want, min)
end

-- Take `units` (and a slice for this worker when the batch has it) from the node's batch.
-- Returns admitted and the units left in the batch.
local function from_lease(ks, units, t, slice)
    local x = dict:get(ks[3])
    if not x or x <= t then
        return false
    end
    local take = units + slice
    local v = dict:incr(ks[4], -take, 0)
    if not v then
        return false
    end
    if v >= 0 then
        if slice > 0 then
            ks[1], ks[2] = slice, x
        end
        return true, v
    end
    if v + slice >= 0 then        -- enough for this request, not for the slice: give back
        dict:incr(ks[4], -v)
        return true, 0
    end
    dict:incr(ks[4], take)
    return false
end

-- Keep the rest of a grant as this node's lease (a new lease replaces an expired one).
local function keep(ks, id, rest, valid)
    local ttl = valid + 1
    if dict:get(ks[5]) == id and (dict:get(ks[3]) or 0) > now() then
        if rest > 0 then
            dict:incr(ks[4], rest, 0, ttl)
        end
        return
    end
    dict:set(ks[4], rest, ttl)
    dict:set(ks[5], id, ttl)
    dict:set(ks[3], now() + valid, ttl)
end

-- Ask Redis for `units` (all-or-nothing) plus a batch; the caller holds the gr: entry.
-- Returns true (granted `units`), false, retry (refused) or nil (failed open).
local function renew(r, ks, units, min)
    if not deg.allow_request() then
        dict:set(ks[8], true, 0.05)
        return nil
    end
    metrics.inc('ratelimit_redis_calls_total{op="rule"}')
    update_time()
    local t0 = now()     -- Redis read its clock after this: t0 + valid ends no later than it
    local res, err = redis_client:with(conf.op_timeout_ms, run, r, ks[9], units + extra(r), min)
    if not res then
        metrics.inc(deg.is_open() and 'ratelimit_redis_errors_total{kind="unavailable"}'
            or 'ratelimit_redis_errors_total{kind="reply"}')
        log(WARN, "tollgate: global rule ", r.id, " failed open: ", err)
        dict:set(ks[8], true, 0.05)   -- the waiters fail open too, without asking again
        return nil
    end
    update_time()
    local granted, valid_ms, retry_ms, remaining = res[1], res[2], res[3], res[4]
    local t = now()
    if granted >= min then
        -- the lease's identity: the end of its (sub-)window, in the node's clock to 10 ms
        local valid = t0 + valid_ms / 1000 - t
        keep(ks, format("%d", floor((t0 + valid_ms / 1000) * 100 + 0.5)), granted - units,
            valid > 0 and valid or 0)
        return true, 0, remaining
    end
    local retry = retry_ms / 1000
    dict:set(ks[6], t + retry, retry > 1 and 1 or (retry > 0.001 and retry or 0.001))
    return false, retry, 0
end

local function try(r, ks, units, t)
    if ks[2] > t and ks[1] >= units then
        ks[1] = ks[1] - units
        return true, 0, 0
    end
    local b = extra(r)
    local ok, rem = from_lease(ks, units, t, r.g_slice)
    if ok then
        -- running low: one request tops the batch up while the others go on spending it
        if rem < b / 4 and b > 0 and dict:add(ks[7], true, conf.op_timeout_ms / 1000 + 0.1) then
            _M.yielded = true
            renew(r, ks, 0, 1)
            dict:delete(ks[7])
        end
        return true, 0, rem
    end
    local neg = dict:get(ks[6])
    if neg and neg > t then
        return false, neg - t, 0
    end
    _M.yielded = true
    local limit_wait = conf.op_timeout_ms / 1000 + 0.1
    for _ = 1, 2 do
        if dict:add(ks[7], true, limit_wait) then
            local a, retry, remaining = renew(r, ks, units, units)
            dict:delete(ks[7])
            return a, retry, remaining
        end
        -- another request of this node is asking Redis: wait for its answer on the dict
        local deadline = now() + limit_wait
        repeat
            sleep(0.001)
        until not dict:get(ks[7]) or now() > deadline
        t = now()
        ok, rem = from_lease(ks, units, t, 0)
        if ok then
            return true, 0, rem
        end
        neg = dict:get(ks[6])
        if neg and neg > t then
            return false, neg - t, 0
        end
        if dict:get(ks[8]) then
            return nil
        end
    end
    return nil
end

--- Admit `units` against global rule r for scope key `skey`. Returns admitted, delay (always 0:
-- a throttled request has already slept), retry_after, remaining, slept, failed_open.
function _M.acquire(r, skey, units, max_delay, t)
    _M.yielded = false
    local ks = counter(r, skey)
    local ok, retry, rem = try(r, ks, units, t or now())
    if ok == nil then
        return true, 0, 0, 0, false, true
    end
    if ok or retry > max_delay then
        return ok, 0, retry, rem
    end
    _M.yielded = true
    sleep(retry)
    dict:delete(ks[6])
    ok, retry, rem = try(r, ks, units, now())
    if ok == nil then
        return true, 0, 0, 0, true, true
    end
    return ok, 0, retry, rem, true
end

return _M
