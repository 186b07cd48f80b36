-- Reservations for long operations (Req 14, Property 9).
-- * A request whose size is unknown at access time (a chunked upload, an object download) pays
--   an estimate up front — x-amz-decoded-content-length or a default for uploads; the Range, or
--   this app's recent average, for downloads — and the log phase settles estimate against real
--   bytes: the difference is refunded to the lease or charged (as debt if the lease is short).
-- * A multipart upload announced with `X-Tollgate-Expected-Size: <bytes>` reserves the bandwidth
--   of all its parts at initiation; parts draw from the reservation; complete or abort returns
--   what is left; a reservation nobody completes is released after `reservation_timeout`.
-- Records live in a fixed ring of slots of the ratelimit dict, so the sweep is bounded work.
local shm = require("tollgate.shm")
local metrics = require("tollgate.metrics")
local bucket = require("tollgate.lease.bucket")

local dict = shm.dict
local now = ngx.now
local log = ngx.log
local format = string.format
local tonumber = tonumber

local _M = {}

local SLOTS = 4096
local conf     -- the gateway's settings (init)

function _M.init(settings)
    conf = settings
end

-- the /metrics gauges of the open reservations
metrics.add_gauges(function(gauges)
    gauges["ratelimit_reserved_tokens"] = dict:get("rsv:reserved") or 0
    gauges["ratelimit_reservations_active"] = dict:get("rsv:active") or 0
end)

--- Settle an estimated charge: refund or charge the difference (Property 9).
function _M.settle(a, estimated, actual, source)
    local diff = estimated - actual
    if diff > 0 then
        bucket.refund(a, diff, source)
    elseif diff < 0 then
        bucket.charge(a, -diff, source)
    end
    return diff
end

local function mp_key(a, path)
    return "rsv:mp:" .. a.id .. ":" .. ngx.md5(path)
end

local function slot_key(n)
    return "rsv:s:" .. n
end

--- Record a multipart reservation of `amount` tokens (already paid from the lease).
function _M.open(a, path, amount)
    local expires = now() + conf.reservation_timeout
    for _ = 1, 8 do
        local n = dict:incr("rsv:next", 1, 0) % SLOTS + 1
        local rec = format("%s %d %d %.3f", a.id, amount, amount, expires)
        if dict:safe_add(slot_key(n), rec) then
            dict:set(mp_key(a, path), n, conf.reservation_timeout + 60)
            metrics.inc('ratelimit_reservations_total{result="created"}')
            return n
        end
    end
    return nil, "no free reservation slot"
end

local function parse(rec)
    local app, est, left, expires = rec:match("^(%S+) (%d+) (%-?%d+) (%S+)$")
    return app, tonumber(est), tonumber(left), tonumber(expires)
end

--- Take up to `want` tokens from the multipart reservation of path; returns what it covered.
function _M.draw(a, path, want)
    local n = dict:get(mp_key(a, path))
    local rec = n and dict:get(slot_key(n))
    if not rec then
        return 0
    end
    local app, est, left, expires = parse(rec)
    if app ~= a.id or left <= 0 then
        return 0
    end
    local covered = want < left and want or left
    -- records are only changed by the worker holding the request; a concurrent part upload of
    -- the same key may race, which at worst lets one part pay from the lease instead
    dict:set(slot_key(n), format("%s %d %d %.3f", app, est, left - covered, expires))
    return covered
end

--- Give `amount` drawn by a request that did not happen back to the reservation of path.
function _M.undraw(a, path, amount)
    if not amount or amount <= 0 then
        return
    end
    local n = dict:get(mp_key(a, path))
    local rec = n and dict:get(slot_key(n))
    if not rec then
        bucket.refund(a, amount)
        return
    end
    local app, est, left, expires = parse(rec)
    dict:set(slot_key(n), format("%s %d %d %.3f", app, est, left + amount, expires))
end

local function release(n, rec, result)
    local app, est, left = parse(rec)
    dict:delete(slot_key(n))
    local a = require("tollgate.config.cache").app(app)
    if a and left > 0 then
        bucket.refund(a, left)
    end
    metrics.inc('ratelimit_reservations_total{result="' .. result .. '"}')
    return est, left
end

--- Complete or abort the multipart upload of path: return what is left of its reservation.
function _M.close(a, path)
    local key = mp_key(a, path)
    local n = dict:get(key)
    local rec = n and dict:get(slot_key(n))
    dict:delete(key)
    if not rec then
        return nil
    end
    local est, left = release(n, rec, "completed")
    log(ngx.INFO, "tollgate: reservation of ", a.id, " completed: estimated ", est,
        ", used ", est - left)
    return left
end

--- Worker 0: release expired reservations (bounded: one pass over the ring).
function _M.sweep()
    local t = now()
    local active, reserved = 0, 0
    for n = 1, SLOTS do
        local rec = dict:get(slot_key(n))
        if rec then
            local app, _, left, expires = parse(rec)
            if expires <= t then
                release(n, rec, "expired")
                log(ngx.WARN, "tollgate: reservation of ", app, " expired with ", left, " unused")
            else
                active = active + 1
                reserved = reserved + left
            end
        end
    end
    dict:set("rsv:active", active)
    dict:set("rsv:reserved", reserved)
end

return _M
