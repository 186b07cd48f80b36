-- Rules with distribution "global": one limit across every node, through Redis
-- (redis-scripts/rule_acquire.lua). Like the tiers' leases, a node takes a small batch of a
-- counter's capacity and spends it locally, but a batch is only valid inside the window
-- (fixed), the sub-window (sliding) or the 100 ms (token bucket) it was granted for, so Redis'
-- count of each (sub-)window bounds what all nodes admit in it. Unused parts expire with it.
-- Redis is asked under the request timeout; when it cannot answer (breaker open, timeout,
-- error) the rule admits and the caller counts `fail_open`.
local scripts = require("tollgate.scripts")
local metrics = require("tollgate.metrics")
local deg = require("tollgate.degradation")

local dict = ngx.shared.tollgate_rules
local now = ngx.now
local update_time = ngx.update_time
local floor = math.floor
local format = string.format
local log = ngx.log
local WARN = ngx.WARN

local _M = {}

local S, R, SC

function _M.init(settings, client, script_set)
    S, R, SC = settings, client, script_set
end

-- units a node asks for beyond this request's: a twentieth of the limit (one call per 5 % of
-- the capacity), at most 1000
local function extra(r)
    local b = floor(r.limit / 20)
    if r.algorithm == "sliding_window" then
        b = floor(b / 4)       -- a batch lives one sub-window: keep it small
    end
    if b > 1000 then
        b = 1000
    end
    return b
end

local function run(red, r, rkey, want, min)
    return scripts.run(red, SC.rule_acquire, 1, rkey, r.algorithm, r.limit, r.window,
        r.burst or 0, want, min)
end

-- Take `units` from this node's lease of counter `lk`. The lease is valid until gx:<lk>.
local function from_lease(lk, units, t)
    local x = dict:get("gx:" .. lk)
    if not x or x <= t then
        return false
    end
    local v = dict:incr("gl:" .. lk, -units, 0)
    if v and v >= 0 then
        return true, v
    end
    if v then
        dict:incr("gl:" .. lk, units)
    end
    return false
end

-- Keep the rest of a grant as this node's lease (a new lease replaces an expired one).
local function keep(lk, id, rest, valid)
    local ttl = valid + 1
    if dict:get("gi:" .. lk) == id and (dict:get("gx:" .. lk) or 0) > now() then
        if rest > 0 then
            dict:incr("gl:" .. lk, rest, 0, ttl)
        end
        return
    end
    dict:set("gl:" .. lk, rest, ttl)
    dict:set("gi:" .. lk, id, ttl)
    dict:set("gx:" .. lk, now() + valid, ttl)
end

local function try(r, lk, rkey, units)
    local t = now()
    local ok, rem = from_lease(lk, units, t)
    if ok then
        return true, 0, rem
    end
    local neg = dict:get("gn:" .. lk)
    if neg and neg > t then
        return false, neg - t, 0
    end
    if not deg.allow_request() then
        return nil
    end
    metrics.inc('ratelimit_redis_calls_total{op="rule"}')
    update_time()
    local t0 = now()     -- Redis read its clock after this: t0 + valid ends no later than it
    local res, err = R:with(S.op_timeout_ms, run, r, rkey, units + extra(r), units)
    if not res then
        metrics.inc(deg.is_open() and 'ratelimit_redis_errors_total{kind="unavailable"}'
            or 'ratelimit_redis_errors_total{kind="reply"}')
        log(WARN, "tollgate: global rule ", r.id, " failed open: ", err)
        return nil
    end
    update_time()
    local granted, valid_ms, retry_ms, remaining = res[1], res[2], res[3], res[4]
    t = now()
    if granted >= units then
        -- the lease's identity: the end of its (sub-)window, in the node's clock to 10 ms
        local valid = t0 + valid_ms / 1000 - t
        keep(lk, format("%d", floor((t0 + valid_ms / 1000) * 100 + 0.5)), granted - units,
            valid > 0 and valid or 0)
        return true, 0, remaining
    end
    local retry = retry_ms / 1000
    dict:set("gn:" .. lk, t + retry, retry > 1 and 1 or (retry > 0.001 and retry or 0.001))
    return false, retry, 0
end

--- Admit `units` against global rule r for scope key `skey`. Returns admitted, delay (always 0:
-- a throttled request has already slept), retry_after, remaining, slept, failed_open.
function _M.acquire(r, skey, units, max_delay)
    local lk = r.id .. ":" .. skey
    local rkey = r.k_global .. skey
    local ok, retry, rem = try(r, lk, rkey, units)
    if ok == nil then
        return true, 0, 0, 0, false, true
    end
    if ok or retry > max_delay then
        return ok, 0, retry, rem
    end
    ngx.sleep(retry)
    dict:delete("gn:" .. lk)
    ok, retry, rem = try(r, lk, rkey, units)
    if ok == nil then
        return true, 0, 0, 0, true, true
    end
    return ok, 0, retry, rem, true
end

return _M
