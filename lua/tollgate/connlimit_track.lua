-- Tracking records of the connection limiter (Req 18, Properties 18 and 20): one record per
-- admitted request in connlimit_dict, a heartbeat that keeps the records of this worker's
-- requests fresh, and a cleanup that force-releases the records nobody refreshes any more.
--
-- Every worker start is a new *generation* g (a shared counter) that owns numbered slots; only
-- g writes, refreshes and reuses its slots, so the request path needs no lock and no scan:
--   wseq        generations started since the dict exists
--   wl:<g>      liveness of g (value: its pid), refreshed by g's heartbeat, short TTL
--   wt:<g>      highest slot number g has used (the range the cleanup scans)
--   t:<g>:<n>   record in slot n: "<id> <last_seen> <created_at> <app> <cluster> <client_ip>",
--               no TTL: it is deleted by its release or by the cleanup, never by expiry
--   x:<id>      status of a record claimed off the fast path: "leaked" (cleanup) or
--               "released" (an owner that had not refreshed it for timeout/2)
-- A record without x:<id> is "active"; a missing record is "released".
-- A killed worker never releases its slots and stops refreshing them: after the timeout the
-- next cleanup run claims each record (dict:add of x:<id>, so an owner that resumes late can
-- never release the same slot a second time) and gives the slot back.
local keys = require("tollgate.keys")

local dict = ngx.shared.connlimit_dict
local now = ngx.now
local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local format = string.format
local match = string.match
local tonumber = tonumber

local _M = {}

local T, H, BATCH, CLAIM_TTL, LIVE_TTL
local on_leak            -- function(app, cluster): give a force-released slot back
local G, prefix, pid
local seq = 0
-- this worker's slots, indexed by slot number
local l_rid, l_key, l_app, l_cluster, l_ip, l_created, l_seen, l_lost = {}, {}, {}, {}, {}, {},
    {}, {}
local free, nfree, top = {}, 0, 0
-- cleanup cursor (per worker: whichever worker runs the cleanup keeps its own)
local cur_g, cur_n, cur_found = 1, 0, 0

--- Start this worker's generation. s: timeout, heartbeat, cleanup_interval, cleanup_batch.
function _M.init(s, leak_fn)
    T, H, BATCH = s.timeout, s.heartbeat, s.cleanup_batch
    CLAIM_TTL = math.max(3600, 4 * (s.timeout + s.cleanup_interval))
    LIVE_TTL = 3 * H + 2
    on_leak = leak_fn
    pid = ngx.worker.pid()
    G = dict:incr("wseq", 1, 0)
    prefix = "t:" .. G .. ":"
    dict:set("wl:" .. G, pid, LIVE_TTL)
    dict:set("wt:" .. G, 0)
end

local function record(n, seen)
    return format("%s %.3f %.3f %s %s %s", l_rid[n], seen, l_created[n], l_app[n],
        l_cluster[n], l_ip[n])
end

local function parse(rec)
    return match(rec, "^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$")
end

local function free_slot(n)
    l_rid[n] = nil
    nfree = nfree + 1
    free[nfree] = n
end

--- Track an admitted request: returns its slot and id, or nil, err (dict full).
function _M.open(app, cluster, ip)
    local n
    if nfree > 0 then
        n = free[nfree]
        free[nfree] = nil
        nfree = nfree - 1
    else
        n = top + 1
    end
    seq = seq + 1
    local rid = G .. "." .. seq
    local t = now()
    l_rid[n], l_app[n], l_cluster[n], l_ip[n] = rid, app, cluster, ip or "-"
    l_created[n], l_seen[n], l_lost[n] = t, t, false
    local key = l_key[n]
    if not key then
        key = prefix .. n
        l_key[n] = key
    end
    if n > top then
        top = n
        dict:set("wt:" .. G, top)
    end
    local ok, err = dict:safe_set(key, record(n, t))
    if not ok then
        free_slot(n)
        return nil, err
    end
    return n, rid
end

--- Release the record in slot n if it still holds request rid (Property 20: a second call is a
-- no-op). Returns true when this call gave the slot back, false when the cleanup already had,
-- nil when slot n does not hold rid; and the seconds the request held the slot.
function _M.close(n, rid)
    if l_rid[n] ~= rid then
        return nil
    end
    local won = true
    if l_lost[n] or now() - l_seen[n] >= T / 2 then
        -- not refreshed for a while: the cleanup may be claiming it right now
        local ok, err = dict:add("x:" .. rid, "released", CLAIM_TTL)
        won = ok or err ~= "exists"
    end
    dict:delete(l_key[n])
    local held = now() - l_created[n]
    free_slot(n)
    return won, held
end

--- Refresh last_seen of this worker's records and its liveness (every heartbeat period).
function _M.heartbeat()
    local t = now()
    dict:set("wl:" .. G, pid, LIVE_TTL)
    dict:set("wt:" .. G, top)
    for n = 1, top do
        if l_rid[n] and not l_lost[n] then
            local ok, err = dict:replace(l_key[n], record(n, t))
            if ok then
                l_seen[n] = t
            elseif err == "not found" then
                l_lost[n] = true    -- the cleanup took it while this worker was stalled
            end
        end
    end
end

-- Force-release one stale record (Property 18). Returns 1 if this call released it.
local function reclaim(key, rec, t)
    local rid, seen, _, app, cluster, ip = parse(rec)
    seen = tonumber(seen)
    if not seen or not keys.valid_id(app) or not keys.valid_id(cluster) then
        log(ERR, "tollgate: connlimit: dropping malformed record ", key)
        dict:delete(key)
        return 0
    end
    if t - seen <= T then
        return 0
    end
    local ok = dict:add("x:" .. rid, "leaked", CLAIM_TTL)
    if not ok then
        return 0            -- its owner is releasing it (and deletes the record)
    end
    on_leak(app, cluster)
    dict:delete(key)
    log(WARN, "tollgate: connlimit: force-released leaked connection ", rid, " app=", app,
        " cluster=", cluster, " client=", ip, format(" idle=%.1fs", t - seen))
    return 1
end

--- One cleanup run: look at up to `budget` slots (default: the cleanup batch), continuing
-- where the last run stopped. Returns the number of slots force-released and looked at.
function _M.cleanup(budget)
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
            cur_n = cur_n + 1
            local key = "t:" .. cur_g .. ":" .. cur_n
            local rec = dict:get(key)
            if rec then
                cur_found = cur_found + 1
                leaked = leaked + reclaim(key, rec, t)
            end
        else
            if top_g and cur_found == 0 and not dict:get("wl:" .. cur_g) then
                dict:delete("wt:" .. cur_g)     -- a finished generation: nothing left to scan
            end
            cur_g, cur_n, cur_found = cur_g + 1, 0, 0
        end
    end
    return leaked, work
end

--- Test hook: set the last_seen of the request in slot n `age` seconds back, as if this worker
-- had been stalled that long (stalled), or had lost the request's log phase (the slot is then
-- neither released nor refreshed nor reused by this worker any more).
function _M.abandon(n, rid, age, stalled)
    if not n or l_rid[n] ~= rid then
        return false
    end
    local seen = now() - age
    if l_created[n] > seen then
        l_created[n] = seen
    end
    if not dict:replace(l_key[n], record(n, seen)) then
        l_lost[n] = true        -- the cleanup already took it: as the heartbeat would find
        return false
    end
    l_seen[n] = seen
    if not stalled then
        l_rid[n] = nil
    end
    return true
end

--- The tracking record of request rid (slot n of this worker) as a table, with its status.
function _M.inspect(n, rid)
    local key = l_key[n] or (prefix .. n)
    local rec = dict:get(key)
    local id, seen, created, app, cluster, ip
    if rec then
        id, seen, created, app, cluster, ip = parse(rec)
    end
    if id ~= rid then
        return { id = rid, status = dict:get("x:" .. rid) or "released" }
    end
    return { id = id, app = app, cluster = cluster, client_ip = ip, created_at = tonumber(created),
             last_seen = tonumber(seen), status = dict:get("x:" .. rid) or "active" }
end

--- Generations known to the dict: pid, liveness, slot range and records held.
function _M.workers()
    local out = {}
    for g = 1, dict:get("wseq") or 0 do
        local top_g = dict:get("wt:" .. g)
        if top_g then
            local records = 0
            for n = 1, top_g do
                if dict:get("t:" .. g .. ":" .. n) then
                    records = records + 1
                end
            end
            local live = dict:get("wl:" .. g)
            out[#out + 1] = { generation = g, pid = live or 0, live = live ~= nil, top = top_g,
                              records = records, self = g == G }
        end
    end
    return out
end

return _M
