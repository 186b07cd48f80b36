-- Degradation levels and the Redis circuit breaker of a node (Req 11, docs/design.md §7).
--   level 0 normal       Redis latency < 10 ms    reserve 1x min target, sync every interval
--   level 1 mild         10-100 ms                reserve 2x, sync 5x less often
--   level 2 significant  > 100 ms                 reserve 5x, sync 10x less often
--   level 3 unavailable  breaker open             fail-open budget for requests needing Redis
-- Latency is an EWMA per worker of every Redis round trip (a timeout counts as its timeout), net
-- of the worker's own event-loop stalls during it (measured by a timer's lateness);
-- worker 0 combines the workers' values every 250 ms, moves up at once and steps down only after
-- the lower level held for `hold` seconds (hysteresis), and logs one line per change.
-- The breaker opens on any unavailability (refused, closed, timeout, READONLY, ...): requests
-- then fail open after one shared-dict read, and after `retry` seconds each worker lets exactly
-- one request probe Redis; a success anywhere closes the breaker.
local metrics = require("tollgate.metrics")

local dict = ngx.shared.ratelimit
local now = ngx.now
local log = ngx.log
local WARN = ngx.WARN
local format = string.format

local _M = {}

local NAMES = { [0] = "normal", [1] = "mild", [2] = "significant", [3] = "unavailable" }
local RESERVE = { [0] = 1, [1] = 2, [2] = 5, [3] = 1 }
local SYNC = { [0] = 1, [1] = 5, [2] = 10, [3] = 10 }
local UP = { 0.010, 0.100 }     -- latency thresholds of levels 1 and 2
local DOWN = { 0.007, 0.070 }   -- and the values below which a level may step down
local ALPHA = 0.2

local conf
local wid
local ewma, last_sample = 0, 0
local probing = false           -- this worker has a probe in flight
local pending_level, pending_since = nil, 0

function _M.init(settings)
    conf = settings
    wid = ngx.worker.id() or 0
end

function _M.level()
    return dict:get("deg:level") or 0
end

function _M.name(level)
    return NAMES[level]
end

--- Minimum reserve target and sync interval at the current level.
function _M.reserve_min()
    return conf.min_target * RESERVE[_M.level()]
end

function _M.sync_interval()
    return conf.sync_interval * SYNC[_M.level()]
end

-- The worker's own event-loop stalls (a long Lua computation, a blocked worker) delay the
-- resumption of a Redis call as much as a slow Redis would. A timer every LAG_EVERY measures
-- when it fires late (stall_total: the seconds since it last ran, summed over its late runs: a
-- stall's start is only known to be after the last run); a call's time is taken
-- net of the stalls during it: those measured since its mark, and the one under way (the timer
-- is due but could not run yet: the loop was busy until now).
local LAG_EVERY = 0.02
local TOLERANCE = 0.005
local stall_total, last_fire = 0, nil

--- The mark a Redis call starts with (client on_start).
function _M.mark()
    return stall_total
end

local function add(sec)
    ewma = ewma + ALPHA * (sec - ewma)
    last_sample = now()
end

--- Seconds of a call of `sec` seconds ending now that were this worker's own stalls.
function _M.stalled(sec, mark)
    if not mark or not last_fire then
        return 0
    end
    local t1 = now()
    local stalled = stall_total - mark
    if t1 - last_fire - LAG_EVERY > TOLERANCE then
        -- the stall began after the timer last ran (when, the loop cannot tell: count from then)
        local t0 = t1 - sec
        stalled = stalled + t1 - (last_fire > t0 and last_fire or t0)
    end
    return stalled < sec and stalled or sec
end

--- A Redis round trip finished after `sec` seconds (ok or not), net of this worker's stalls
--- (stalled()).
_M.observe = add

local function lag(premature)
    if premature then
        return
    end
    ngx.update_time()
    local t = now()
    if last_fire then
        if t - last_fire - LAG_EVERY > TOLERANCE then
            stall_total = stall_total + (t - last_fire)    -- from the last time it ran
        end
    end
    last_fire = t
end

_M.TIMER_HELPERS = { lag }     -- run interpreted (tollgate.handler)

--- Start measuring this worker's stalls (init_worker).
function _M.start()
    local ok, err = ngx.timer.every(LAG_EVERY, lag)
    if not ok then
        log(ngx.ERR, "tollgate: cannot start the stall measure: ", err)
    end
end

local function open(err)
    if not dict:get("brk:open") then
        log(WARN, "tollgate: redis unavailable (", err, "), failing open")
    end
    dict:set("brk:open", true)
    dict:set("brk:until", now() + conf.breaker_retry)
    metrics.inc('ratelimit_breaker_opened_total')
end

--- Outcome of a Redis call: err is nil on success; unavailable tells whether it counts.
function _M.result(err, unavailable)
    probing = false
    if err and unavailable then
        open(err)
    elseif not err and dict:get("brk:open") then
        dict:delete("brk:open")
        log(WARN, "tollgate: redis reachable again")
    end
end

function _M.is_open()
    return dict:get("brk:open") ~= nil
end

--- May a request wait on Redis now? False while the breaker is open, except for one probe per
-- worker once the retry time has passed.
function _M.allow_request()
    if not dict:get("brk:open") then
        return true
    end
    if probing or now() < (dict:get("brk:until") or 0) then
        return false
    end
    probing = true
    return true
end

--- May background work use Redis now? (it probes too once the retry time has passed)
function _M.allow_background()
    return not dict:get("brk:open") or now() >= (dict:get("brk:until") or 0)
end

-- every worker: publish its latency while it has recent samples
function _M.publish()
    if now() - last_sample < 2 then
        dict:set("deg:lat:" .. wid, ewma, 2)
    end
end

local function latency_level(lat, current)
    local want = (lat > UP[2] and 2) or (lat > UP[1] and 1) or 0
    if want < current and current < 3 and lat > DOWN[current] then
        want = current  -- not yet below the step-down value
    end
    return want
end

--- Worker 0: decide the node's level.
function _M.evaluate()
    local lat = 0
    for w = 0, ngx.worker.count() - 1 do
        local v = dict:get("deg:lat:" .. w)
        if v and v > lat then
            lat = v
        end
    end
    local current = _M.level()
    local want = dict:get("brk:open") and 3 or latency_level(lat, current)
    local t = now()
    if want < current then
        if pending_level ~= want then
            pending_level, pending_since = want, t
        end
        if t - pending_since < conf.degradation_hold then
            return current
        end
    end
    pending_level = nil
    if want ~= current then
        dict:set("deg:level", want)
        log(WARN, format("tollgate: degradation level %d (%s) -> %d (%s), redis latency %.1f ms",
            current, NAMES[current], want, NAMES[want], lat * 1000))
    end
    return want
end

function _M.latency()
    return ewma
end

-- the /metrics gauge of this node's degradation level
metrics.add_gauges(function(gauges)
    gauges["ratelimit_degradation_level"] = _M.level()
end)

return _M
