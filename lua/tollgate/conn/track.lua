-- Tracking records of the connection limiter (Req 18, Properties 18 and 20): one record per
-- admitted request in connlimit_dict, a heartbeat that keeps the records of this worker's
-- requests fresh, and a cleanup that force-releases the records nobody refreshes any more.
--
-- Every worker start is a new *generation* g (a shared counter) that owns numbered slots; only
-- g writes, refreshes and reuses its slots, so the request path needs no lock and no scan:
--   wseq        generations started since the dict exists
--   wl:<g>      liveness of g (value: its pid), refreshed by g's heartbeat, short TTL
--   wp:<g>      pid of g, no TTL (whether its process still exists, for FREE records)
--   wt:<g>      highest slot number g has used (the range the cleanup scans)
--   t:<g>:<n>   record in slot n: "<id> <last_seen> <created_at> <app> <cluster> <client_ip>",
--               no TTL: it is deleted by its release or by the cleanup, never by expiry.
--               A request writes it compact: the number stamp(created_at, id) with the shdict
--               flags naming its (app, cluster) tag; the next heartbeat (in min(5, timeout/4) s)
--               rewrites it in full. A compact record is complete but for the client IP, which
--               its worker holds until then (formatting the full record per request cost more
--               than the rest of the connection limiter).
--   tk:<app>:<cluster> / tg:<tag>   the tags of compact records (tseq numbers them); kept
--   x:<t:key>@<stamp>   status of a record claimed off the fast path: "leaked" (cleanup) or
--               "released" (an owner that had not refreshed it for timeout/2); both sides name
--               a request by its slot and stamp (creation ms and low bits of its id)
-- A record without its x: key is "active"; a missing record, or one holding FREE (0), is
-- "released". A release writes FREE rather than deleting the key: the next request of the
-- slot then rewrites the dict node in place (same value size), where a delete and a fresh
-- set would free and allocate one per request (-0.26k instructions per request). The cleanup
-- deletes the FREE records of generations whose process is gone (not merely late with its
-- heartbeat: a stalled worker may resume and reuse its slots).
-- A killed worker never releases its slots and stops refreshing them: after the timeout the
-- next cleanup run claims each record (dict:add of its x: key, so an owner that resumes late can
-- never release the same slot a second time) and gives the slot back.
--
-- Records in the area. With the counter area (tollgate.counters, TOLLGATE_SHARED_COUNTERS=on) the
-- master also maps a table of REGIONS x SLOTS compact records behind REGIONS owner words; a
-- generation claims a free region when it starts (CAS of its owner word from 0 to the generation)
-- and keeps its compact records of slots 1..SLOTS there, as three numbers per slot: stamp (0:
-- released), tag, last_seen (a double; 0 until a heartbeat, and then the creation time in the stamp
-- counts). A request then costs one atomic store and a compare-and-swap instead of two dict writes.
-- The stamp is the authority: the owner releases its request with CAS(stamp -> 0), the cleanup
-- force-releases a stale one with the same CAS, and whoever swaps first gave the slot back (the
-- other learns it lost), so no claim key is needed to decide; the cleanup still writes
-- x:<t:key>@<stamp> = "leaked" for inspect(). The heartbeat refreshes last_seen in the slot and
-- stores the client IP once under ti:<g>:<n> (read by the leak log). A region is given back when
-- its generation's process is gone and the region holds no record. Without the area, without a free
-- region, or for slots beyond SLOTS, records are dict records as above.
local keys = require("tollgate.keys")
local counters = require("tollgate.counters")
local mastermap = require("tollgate.mastermap")
local ffi = require("ffi")

pcall(ffi.cdef, "int kill(int pid, int sig);")
local ESRCH = 3

local dict = ngx.shared.connlimit_dict
local now = ngx.now
local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local format = string.format
local match = string.match
local tonumber = tonumber
local type = type
local floor = math.floor

local _M = {}

local FREE = 0          -- value of a released slot's record (a stamp is never 0)
local REGIONS, SLOTS = 64, 1024
local STRIDE = 4        -- int64s per slot in the area: stamp, tag, last_seen (double), unused
local owners            -- int64_t[REGIONS]: the generation owning each region, 0: free
local area, area_d      -- the record table as int64_t * and as double *; nil without one
local region            -- this generation's region, nil: its records are dict records
local T, H, BATCH, CLAIM_TTL, LIVE_TTL
local on_leak            -- function(app, cluster): give a force-released slot back
local G, prefix, pid
local seq = 0
-- this worker's slots, indexed by slot number
local l_rid, l_key, l_app, l_cluster, l_ip, l_created, l_seen, l_lost = {}, {}, {}, {}, {}, {},
    {}, {}
local l_at, l_info = {}, {}     -- area index of the slot's record (false: a dict record); its
                                -- ti: key when the IP was stored
local free, nfree, top = {}, 0, 0
-- cleanup cursor (per worker: whichever worker runs the cleanup keeps its own); cur_live:
-- generation cur_g's process might still run when the scan entered it; cur_r: its region
local cur_g, cur_n, cur_found, cur_live, cur_r = 1, 0, 0, true, nil

--- Map the record table (init phase, after counters.create). Returns true, or nil, err (the
-- records are then dict records).
function _M.map()
    if not counters.shared() then
        return nil, "no counter area"
    end
    -- its address in the never-evicting registry: connlimit_dict could evict it, and a reload
    -- would then map a blank table while the old workers' regions hold requests
    local reg, pfx = counters.registry()
    local p, found = mastermap.map(reg, pfx .. "#tracks", (REGIONS + REGIONS * SLOTS * STRIDE) * 8)
    if not p then
        return nil, found
    end
    owners = ffi.cast("int64_t *", p)
    area = owners + REGIONS
    area_d = ffi.cast("double *", area)
    return true
end

-- The region generation g owns, nil for none.
local function region_of(g)
    if not area then
        return nil
    end
    for r = 0, REGIONS - 1 do
        if tonumber(owners[r]) == g then
            return r
        end
    end
    return nil
end
_M.region_of = region_of

-- index in the area of slot n (1..SLOTS) of region r
local function at(r, n)
    return (r * SLOTS + n - 1) * STRIDE
end

local function info_key(g, n)
    return "ti:" .. g .. ":" .. n
end

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
    dict:set("wp:" .. G, pid)
    dict:set("wt:" .. G, 0)
    region = nil
    if area then
        for r = 0, REGIONS - 1 do
            if counters.cas(owners + r, 0, G) then
                region = r
                break
            end
        end
        if not region then
            log(WARN, "tollgate: connlimit: no free region of tracking records; generation ", G,
                " keeps its records in connlimit_dict")
        end
    end
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

local function record(n, seen)
    return format("%d.%d %.3f %.3f %s %s %s", G, l_rid[n], seen, l_created[n], l_app[n],
        l_cluster[n], l_ip[n])
end

-- A request's stamp: its creation time in ms and the low 11 bits of its id, in one integer
-- below 2^53 (until 2109). It is the value of a compact record and names the request in its
-- claim key: two requests of one slot created in the same ms still differ.
local STAMP_IDS = 2048
local function stamp(created, id)
    return floor(created * 1000 + 0.5) * STAMP_IDS + id % STAMP_IDS
end

local function stamp_time(st)
    return floor(st / STAMP_IDS) / 1000
end

-- the claim key of the request with stamp st in slot key
local function claim_key(key, st)
    return format("x:%s@%.0f", key, st)
end

local tags = {}     -- tag -> { app, cluster }, a tag never changes its meaning

--- The tag of (app, cluster) for compact records, registered on first use; nil when the dict
-- is full (the caller then writes full records).
function _M.tag(app, cluster)
    local k = "tk:" .. app .. ":" .. cluster
    local t = dict:get(k)
    if t then
        return t
    end
    local n, err = dict:incr("tseq", 1, 0)
    if not n or n >= 2 ^ 32 then
        log(ERR, "tollgate: connlimit: no record tag for ", app, "/", cluster, ": ",
            err or "tags exhausted")
        return nil
    end
    local ok
    ok, err = dict:safe_set("tg:" .. n, app .. " " .. cluster)
    if ok then
        ok, err = dict:safe_add(k, n)
        if ok then
            return n
        end
    end
    if err ~= "exists" then
        log(ERR, "tollgate: connlimit: no record tag for ", app, "/", cluster, ": ", err)
    end
    return dict:get(k)      -- another worker registered it first (or nil: the dict is full)
end

local function untag(tag)
    local t = tags[tag]
    if t then
        return t[1], t[2]
    end
    local app, cluster = match(dict:get("tg:" .. tag) or "", "^(%S+) (%S+)$")
    if app then
        tags[tag] = { app, cluster }
    end
    return app, cluster
end

local function parse(rec)
    return match(rec, "^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$")
end

local function free_slot(n)
    l_rid[n] = nil
    nfree = nfree + 1
    free[nfree] = n
end

--- Track an admitted request (tag: its compact-record tag, or nil for a full record): returns
-- its slot and id (a number, unique in this worker), or nil, err (dict full).
function _M.open(app, cluster, ip, tag)
    local n
    if nfree > 0 then
        n = free[nfree]
        free[nfree] = nil
        nfree = nfree - 1
    else
        n = top + 1
    end
    seq = seq + 1
    local rid = seq
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
    if tag and region and n <= SLOTS then
        local i = at(region, n)
        l_at[n] = i
        area[i + 1] = tag
        area_d[i + 2] = 0                           -- not seen since its creation
        counters.store(area + i, stamp(t, rid))     -- publishes tag and last_seen with it
        return n, rid
    end
    l_at[n] = false
    local ok, err
    if tag then
        ok, err = dict:safe_set(key, stamp(t, rid), 0, tag)
    else
        ok, err = dict:safe_set(key, record(n, t))
    end
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
    local i = l_at[n]
    if i then
        -- the stamp decides between this release and a force-release by the cleanup
        won = counters.cas(area + i, stamp(l_created[n], rid), FREE)
        if l_info[n] then
            dict:delete(l_info[n])
            l_info[n] = nil
        end
    else
        if l_lost[n] or now() - l_seen[n] >= T / 2 then
            -- not refreshed for a while: the cleanup may be claiming it right now
            local ok, err = dict:add(claim_key(l_key[n], stamp(l_created[n], rid)), "released",
                CLAIM_TTL)
            won = ok or err ~= "exists"
        end
        dict:set(l_key[n], FREE)
    end
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
        local i = l_at[n]
        if l_rid[n] and not l_lost[n] and i then
            area_d[i + 2] = t
            -- after the refresh: a record the cleanup swapped away meanwhile is lost
            if tonumber(area[i]) == stamp(l_created[n], l_rid[n]) then
                l_seen[n] = t
                if not l_info[n] then
                    l_info[n] = info_key(G, n)
                    dict:safe_set(l_info[n], l_ip[n])
                end
            else
                l_lost[n] = true
            end
        elseif l_rid[n] and not l_lost[n] then
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
local function reclaim(key, rec, t, tag)
    local rid, seen, created, app, cluster, ip, st
    if type(rec) == "number" then     -- compact: never refreshed, seen when created
        st, ip = rec, "-"
        seen = stamp_time(rec)
        rid = format("%s@%.0f", key, rec)
        app, cluster = untag(tag)
    else
        rid, seen, created, app, cluster, ip = parse(rec)
        seen, created = tonumber(seen), tonumber(created)
        local id = tonumber(match(rid or "", "^%d+%.(%d+)$"))
        st = created and id and stamp(created, id)
    end
    if not seen or not st or not keys.valid_id(app) or not keys.valid_id(cluster) then
        log(ERR, "tollgate: connlimit: dropping malformed record ", key)
        dict:delete(key)
        return 0
    end
    if t - seen <= T then
        return 0
    end
    local ok = dict:add(claim_key(key, st), "leaked", CLAIM_TTL)
    if not ok then
        return 0            -- its owner is releasing it (and deletes the record)
    end
    on_leak(app, cluster)
    dict:delete(key)
    log(WARN, "tollgate: connlimit: force-released leaked connection ", rid, " app=", app,
        " cluster=", cluster, " client=", ip, format(" idle=%.1fs", t - seen))
    return 1
end

-- Force-release the area record at index i if stale (Property 18). Returns 1 if this call did.
local function reclaim_area(key, i, st, t, ikey)
    local seen = area_d[i + 2]
    if seen == 0 then
        seen = stamp_time(st)
    end
    if t - seen <= T then
        return 0
    end
    local app, cluster = untag(tonumber(area[i + 1]))
    -- the swap decides: the owner's release swaps the same stamp
    if not counters.cas(area + i, st, FREE) then
        return 0
    end
    if not app then
        log(ERR, "tollgate: connlimit: dropping record ", key, " of an unknown tag")
        return 0
    end
    on_leak(app, cluster)
    dict:add(claim_key(key, st), "leaked", CLAIM_TTL)
    local ip = dict:get(ikey) or "-"
    dict:delete(ikey)
    log(WARN, "tollgate: connlimit: force-released leaked connection ", key, "@",
        format("%.0f", st), " app=", app, " cluster=", cluster, " client=", ip,
        format(" idle=%.1fs", t - seen))
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
            if cur_n == 0 then
                cur_live = running(cur_g)
                cur_r = region_of(cur_g)
            end
            cur_n = cur_n + 1
            local key = "t:" .. cur_g .. ":" .. cur_n
            local i = cur_r and cur_n <= SLOTS and at(cur_r, cur_n)
            local st = i and tonumber(area[i]) or FREE
            if st ~= FREE then
                cur_found = cur_found + 1
                leaked = leaked + reclaim_area(key, i, st, t, info_key(cur_g, cur_n))
            elseif i and not cur_live then
                dict:delete(info_key(cur_g, cur_n))     -- left by a worker killed in close()
            end
            local rec, tag
            if st == FREE then
                rec, tag = dict:get(key)
            end
            if rec == FREE then
                if not cur_live then
                    dict:delete(key)            -- nobody reuses the slots of a gone generation
                end
            elseif rec then
                cur_found = cur_found + 1
                leaked = leaked + reclaim(key, rec, t, tag)
            end
        else
            -- a finished generation (no record left, and gone since before this pass entered
            -- it, so the pass deleted its FREE records): nothing left to scan
            if top_g and cur_found == 0 and (cur_n == 0 or not cur_live)
                    and not dict:get("wl:" .. cur_g) then
                -- a region is given back only once its process is gone: a stalled worker
                -- that resumes writes to it without looking
                local r = region_of(cur_g)
                if r == nil or not running(cur_g) then
                    if r then
                        counters.cas(owners + r, cur_g, 0)
                    end
                    dict:delete("wt:" .. cur_g)
                    dict:delete("wp:" .. cur_g)
                end
            end
            cur_g, cur_n, cur_found = cur_g + 1, 0, 0
        end
    end
    return leaked, work
end

--- Test hook: set the last_seen of the request in slot n `age` seconds back, as if this worker
-- had been stalled that long (stalled), or had lost the request's log phase (the slot is then
-- neither released nor refreshed nor reused by this worker any more). Returns true and the
-- record's claim key, or false.
function _M.abandon(n, rid, age, stalled)
    if not n or l_rid[n] ~= rid then
        return false
    end
    -- created_at stays: with last_seen, the record's claim key (slot and creation time) would
    -- move, and two requests backdated alike in one slot would share it
    local seen = now() - age
    local i = l_at[n]
    if i then
        -- as a heartbeat `age` seconds ago: last_seen and the client IP in place
        if tonumber(area[i]) ~= stamp(l_created[n], rid) then
            l_lost[n] = true
            return false
        end
        area_d[i + 2] = seen
        l_info[n] = l_info[n] or info_key(G, n)
        dict:safe_set(l_info[n], l_ip[n])
    elseif not dict:replace(l_key[n], record(n, seen)) then
        l_lost[n] = true        -- the cleanup already took it: as the heartbeat would find
        return false
    end
    local claim = claim_key(l_key[n], stamp(l_created[n], rid))
    l_seen[n] = seen
    if not stalled then
        l_rid[n] = nil
    end
    return true, claim
end

--- Test hook: as if this worker had died `age` seconds ago, right after opening the request in
-- slot n, before a heartbeat rewrote its compact record: the record stays compact, created
-- `age` seconds back, and this worker forgets the request. Returns true and its claim key, or
-- false when the slot does not hold rid or its record is not compact any more.
function _M.orphan(n, rid, age)
    if not n or l_rid[n] ~= rid then
        return false
    end
    local i = l_at[n]
    local rec, tag
    if i then
        rec = tonumber(area[i])
    else
        rec, tag = dict:get(l_key[n])
    end
    if type(rec) ~= "number" or rec == FREE or (i and l_info[n]) then
        return false
    end
    local st = rec - floor(age * 1000 + 0.5) * STAMP_IDS
    if i then
        area_d[i + 2] = 0
        if not counters.cas(area + i, rec, st) then
            return false
        end
    elseif not dict:replace(l_key[n], st, 0, tag) then
        return false
    end
    l_rid[n], l_created[n] = nil, stamp_time(st)
    return true, claim_key(l_key[n], st)
end

--- Test hook: the claim key of the request now in slot n (pass it to inspect later).
function _M.claim_of(n)
    return l_rid[n] and claim_key(l_key[n], stamp(l_created[n], l_rid[n]))
end

--- The tracking record of request rid (slot n of this worker; claim: its claim_of) as a
-- table, with its status.
function _M.inspect(n, rid, claim)
    local key = l_key[n] or (prefix .. n)
    local i = l_at[n]
    local rec, tag, seen
    if i then
        rec, tag, seen = tonumber(area[i]), tonumber(area[i + 1]), area_d[i + 2]
    else
        rec, tag = dict:get(key)
    end
    if rec == FREE then
        rec = nil
    end
    local full_id = G .. "." .. rid
    local r
    if type(rec) == "number" then
        -- the slot's request, or the last one of a slot this worker gave up (abandon, orphan)
        local mine = l_rid[n] == rid
        if (mine or l_rid[n] == nil) and l_created[n] and rec == stamp(l_created[n], rid) then
            local app, cluster = untag(tag)
            local created = stamp_time(rec)
            local ip = mine and l_ip[n] or (l_info[n] and dict:get(l_info[n])) or "-"
            if not seen or seen == 0 then
                seen = created
            end
            r = { id = full_id, app = app, cluster = cluster, client_ip = ip,
                  created_at = created, last_seen = seen }
        end
    elseif rec then
        local id, fseen, created, app, cluster, ip = parse(rec)
        if id == full_id then
            r = { id = id, app = app, cluster = cluster, client_ip = ip,
                  created_at = tonumber(created), last_seen = tonumber(fseen) }
        end
    end
    local status = claim and dict:get(claim)
    if not r then
        return { id = full_id, status = status or "released" }
    end
    r.status = status or "active"
    return r
end

--- Slots 1..top_g of generation g: records held, records released (FREE), in the area or in
-- the dict.
function _M.slots(g, top_g)
    local r = region_of(g)
    local held, released = 0, 0
    for n = 1, top_g or 0 do
        local in_area = r and n <= SLOTS
        local rec = in_area and tonumber(area[at(r, n)]) or FREE
        if rec == FREE then
            rec = dict:get("t:" .. g .. ":" .. n) or (in_area and FREE or nil)
        end
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
    local out = {}
    for g = 1, dict:get("wseq") or 0 do
        local top_g = dict:get("wt:" .. g)
        if top_g then
            local records = _M.slots(g, top_g)
            local live = dict:get("wl:" .. g)
            out[#out + 1] = { generation = g, pid = live or 0, live = live ~= nil, top = top_g,
                              records = records, self = g == G }
        end
    end
    return out
end

return _M
