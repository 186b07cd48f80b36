-- The leak cleanup of the connection limiter (Property 18): scans the tracking records
-- (tollgate.conn.record) of every generation, a batch per run, and force-releases those whose
-- last_seen is older than the timeout — the requests of a killed worker, or of a request whose
-- log phase never ran. It deletes the FREE records of generations whose process is gone (not
-- merely late with its heartbeat: a stalled worker may resume and reuse its slots) and then
-- forgets the generation.
local ffi = require("ffi")
local keys = require("tollgate.keys")
local record = require("tollgate.conn.record")

pcall(ffi.cdef, "int kill(int pid, int sig);")
local ESRCH = 3

local dict = ngx.shared.connlimit_dict
local now = ngx.now
local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local format = string.format
local tonumber = tonumber
local type = type

local FREE = record.FREE

local _M = {}

local timeout, BATCH, CLAIM_TTL
local on_leak            -- function(app, cluster): give a force-released slot back
-- cleanup cursor (per worker: whichever worker runs the cleanup keeps its own); cur_live:
-- generation cur_g's process might still run when the scan entered it
local cur_g, cur_n, cur_found, cur_live = 1, 0, 0, true

--- s: timeout, cleanup_batch, cleanup_interval; leak_fn(app, cluster) gives a slot back.
function _M.init(s, leak_fn)
    timeout, BATCH = s.timeout, s.cleanup_batch
    CLAIM_TTL = math.max(3600, 4 * (s.timeout + s.cleanup_interval))
    on_leak = leak_fn
end

-- Might generation g's process still run? (Its liveness key, else its pid: a generation
-- without a known pid counts as running.)
local function running(g)
    if dict:get("wl:" .. g) then
        return true
    end
    local p = dict:get("wp:" .. g)
    return p == nil or ffi.C.kill(p, 0) == 0 or ffi.errno() ~= ESRCH
end

local function drop(g, n)
    dict:delete(record.key(g, n))
    dict:delete(record.seen_key(g, n))
    dict:delete(record.ip_key(g, n))
end

-- Force-release the record st (tag) in slot n of generation g if stale. Returns 1 if this call
-- released it.
local function reclaim(g, n, st, tag, t)
    local key = record.key(g, n)
    local app, cluster = record.untag(tag)
    if type(st) ~= "number" or not keys.valid_id(app) or not keys.valid_id(cluster) then
        log(ERR, "tollgate: connlimit: dropping malformed record ", key)
        drop(g, n)
        return 0
    end
    local seen = tonumber(dict:get(record.seen_key(g, n))) or record.stamp_time(st)
    if t - seen <= timeout then
        return 0
    end
    if not dict:add(record.claim_key(key, st), "leaked", CLAIM_TTL) then
        return 0            -- its owner is releasing it
    end
    on_leak(app, cluster)
    local ip = dict:get(record.ip_key(g, n)) or "-"
    drop(g, n)
    log(WARN, "tollgate: connlimit: force-released leaked connection ", key, "@",
        format("%.0f", st), " app=", app, " cluster=", cluster, " client=", ip,
        format(" idle=%.1fs", t - seen))
    return 1
end

--- One cleanup run: look at up to `budget` slots (default: the cleanup batch), continuing
-- where the last run stopped. Returns the number of slots force-released and looked at.
function _M.run(budget)
    budget = budget or BATCH
    ngx.update_time()
    local t = now()
    local gens = dict:get("wseq") or 0
    local leaked, work, wraps = 0, 0, 0
    while work < budget do
        if cur_g > gens then
            wraps = wraps + 1
            if wraps > 1 or gens == 0 then
                break
            end
            cur_g, cur_n, cur_found = 1, 0, 0
        end
        work = work + 1
        local top_g = dict:get("wt:" .. cur_g)
        if top_g and cur_n < top_g then
            if cur_n == 0 then
                cur_live = running(cur_g)
            end
            cur_n = cur_n + 1
            local st, tag = dict:get(record.key(cur_g, cur_n))
            if st == FREE then
                if not cur_live then
                    drop(cur_g, cur_n)      -- nobody reuses the slots of a gone generation
                end
            elseif st then
                cur_found = cur_found + 1
                leaked = leaked + reclaim(cur_g, cur_n, st, tag, t)
            end
        else
            -- a finished generation (no record left, and gone since before this pass entered
            -- it, so the pass deleted its FREE records): nothing left to scan
            if top_g and cur_found == 0 and (cur_n == 0 or not cur_live)
                    and not dict:get("wl:" .. cur_g) then
                dict:delete("wt:" .. cur_g)
                dict:delete("wp:" .. cur_g)
            end
            cur_g, cur_n, cur_found = cur_g + 1, 0, 0
        end
    end
    return leaked, work
end

--- Slots 1..top_g of generation g: records held, records released (FREE).
function _M.slots(g, top_g)
    local held, released = 0, 0
    for n = 1, top_g or 0 do
        local rec = dict:get(record.key(g, n))
        if rec == FREE then
            released = released + 1
        elseif rec then
            held = held + 1
        end
    end
    return held, released
end

--- Generations known to the dict: pid, liveness, slot range and records held.
function _M.workers()
    local own = require("tollgate.conn.track").generation()
    local out = {}
    for g = 1, dict:get("wseq") or 0 do
        local top_g = dict:get("wt:" .. g)
        if top_g then
            local records = _M.slots(g, top_g)
            local live = dict:get("wl:" .. g)
            out[#out + 1] = { generation = g, pid = live or 0, live = live ~= nil, top = top_g,
                              records = records, self = g == own }
        end
    end
    return out
end

return _M
