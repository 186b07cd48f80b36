-- The tracking records of the connection limiter (Req 18, Properties 18 and 20) in
-- connlimit_dict: their keys, their one format, and the tags naming their (app, cluster).
--
-- Every worker start is a new *generation* g (a shared counter) that owns numbered slots; only
-- g writes, refreshes and reuses its slots, so the request path needs no lock and no scan:
--   wseq        generations started since the dict exists
--   wl:<g>      liveness of g (value: its pid), refreshed by g's heartbeat, short TTL
--   wp:<g>      pid of g, no TTL (whether its process still exists)
--   wt:<g>      highest slot number g has used (the range the cleanup scans)
--   t:<g>:<n>   the record of slot n: the request's stamp (its creation time in ms and the low
--               bits of its id, one number) with the shdict flags naming its (app, cluster) tag;
--               FREE (0) once released. No TTL: its release or the cleanup ends it.
--   ts:<g>:<n>  last_seen of a request that outlived a heartbeat (absent: its creation time)
--   ti:<g>:<n>  its client IP, written with the first ts: (the worker holds it until then)
--   tk:<app>:<cluster> / tg:<tag>   the tags (tseq numbers them); kept
--   x:<t:key>@<stamp>   status of a record claimed off the fast path: "leaked" (cleanup) or
--               "released" (an owner that had not refreshed it for timeout/2); both sides name a
--               request by its slot and stamp, so two requests of one slot never share it
-- A request costs one dict write at its start (the record) and one at its end (FREE, in place:
-- the same value size, no free and allocate); only a request that outlives a heartbeat costs
-- its side keys.
local dict = ngx.shared.connlimit_dict
local log = ngx.log
local ERR = ngx.ERR
local format = string.format
local match = string.match
local floor = math.floor

local _M = {}

_M.FREE = 0     -- the value of a released slot's record (a stamp is never 0)

function _M.key(g, n) return "t:" .. g .. ":" .. n end
function _M.seen_key(g, n) return "ts:" .. g .. ":" .. n end
function _M.ip_key(g, n) return "ti:" .. g .. ":" .. n end

-- A request's stamp: its creation time in ms and the low 11 bits of its id, in one integer
-- below 2^53 (until 2109).
local STAMP_IDS = 2048
_M.STAMP_IDS = STAMP_IDS

function _M.stamp(created, id)
    return floor(created * 1000 + 0.5) * STAMP_IDS + id % STAMP_IDS
end

function _M.stamp_time(st)
    return floor(st / STAMP_IDS) / 1000
end

--- The claim key of the request with stamp st in the record under key.
function _M.claim_key(key, st)
    return format("x:%s@%.0f", key, st)
end

local tags = {}     -- tag -> { app, cluster }: a tag never changes its meaning

--- The tag of (app, cluster), registered on first use; nil when the dict is full.
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

--- app, cluster of a tag (nil for an unknown one).
function _M.untag(tag)
    local t = tags[tag]
    if t then
        return t[1], t[2]
    end
    local app, cluster = match(dict:get("tg:" .. tostring(tag)) or "", "^(%S+) (%S+)$")
    if app then
        tags[tag] = { app, cluster }
    end
    return app, cluster
end

return _M
