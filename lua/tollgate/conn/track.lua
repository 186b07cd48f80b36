-- This worker's tracking records (tollgate.conn.record has their keys and format): one per
-- admitted request, opened in the access phase and closed in the log phase (Property 20: a
-- second close is a no-op), and a heartbeat that keeps the records of long requests fresh so
-- that the cleanup (tollgate.conn.cleanup) force-releases only those nobody refreshes any more.
-- A killed worker never releases its slots and stops refreshing them: after the timeout the
-- next cleanup run claims each record (dict:add of its x: key, so an owner that resumes late can
-- never release the same slot a second time) and gives the slot back.
local record = require("tollgate.conn.record")
local ffi = require("ffi")

local dict = ngx.shared.connlimit_dict
local now = ngx.now
local floor = math.floor
local tonumber = tonumber

local stamp, stamp_time, claim_key = record.stamp, record.stamp_time, record.claim_key
local FREE = record.FREE

local _M = {}

local timeout, CLAIM_TTL, LIVE_TTL
local generation, pid
local seq = 0
-- this worker's slots, indexed by slot number: request id, record key, client IP, creation
-- time, last refresh, lost (the cleanup took it), side keys written (ts:, ti:)
local l_rid, l_key, l_ip, l_created, l_seen, l_lost, l_side = {}, {}, {}, {}, {}, {}, {}
local free, nfree, top = {}, 0, 0
-- body deadlines: the time by which a request with a body must be done, and its nginx request
-- (ngx_http_request_t *, alive while its slot is held: the log phase closes the slot)
local l_dead, l_req = {}, {}
local ndead = 0

-- The first fields of nginx's request and connection structs (stable since nginx 1.0): the
-- request's "HTTP" signature, its connection, the connection's socket.
pcall(ffi.cdef, [[
typedef struct { uint32_t signature; void *connection; } tg_ngx_request_head_t;
typedef struct { void *data; void *read; void *write; int fd; } tg_ngx_connection_head_t;
int shutdown(int sockfd, int how);
]])
local req_head_t = ffi.typeof("tg_ngx_request_head_t *")
local conn_head_t = ffi.typeof("tg_ngx_connection_head_t *")
local HTTP_SIGNATURE = 0x50545448
local SHUT_RDWR = 2

--- Start this worker's generation. s: timeout, heartbeat, cleanup_interval.
function _M.init(s)
    timeout = s.timeout
    CLAIM_TTL = math.max(3600, 4 * (s.timeout + s.cleanup_interval))
    LIVE_TTL = 3 * s.heartbeat + 2
    pid = ngx.worker.pid()
    generation = dict:incr("wseq", 1, 0)
    dict:set("wl:" .. generation, pid, LIVE_TTL)
    dict:set("wp:" .. generation, pid)
    dict:set("wt:" .. generation, 0)
end

--- This worker's generation and the claim keys' TTL (for tollgate.conn.cleanup).
function _M.generation()
    return generation, CLAIM_TTL
end

local function free_slot(n)
    l_rid[n] = nil
    nfree = nfree + 1
    free[nfree] = n
end

local function drop_side(n)
    if l_side[n] then
        dict:delete(record.seen_key(generation, n))
        dict:delete(record.ip_key(generation, n))
        l_side[n] = nil
    end
end

--- Track an admitted request of (app, cluster) whose record tag is `tag` (tollgate.conn.record
-- .tag): returns its slot and id (a number, unique in this worker), or nil, err.
function _M.open(ip, tag)
    if not tag then
        return nil, "no record tag"
    end
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
    l_rid[n], l_ip[n], l_created[n], l_seen[n], l_lost[n] = rid, ip or "-", t, t, false
    local key = l_key[n]
    if not key then
        key = record.key(generation, n)
        l_key[n] = key
    end
    if n > top then
        top = n
        dict:set("wt:" .. generation, top)
    end
    local ok, err = dict:safe_set(key, stamp(t, rid), 0, tag)
    if not ok then
        free_slot(n)
        return nil, err
    end
    return n, rid
end

local on_cut, check_every = nil, 1     -- set by deadline_check()
local armed = false
local deadlines

-- the deadline check runs only while this worker has requests with a deadline: a timer armed
-- by the first of them, re-armed while any is left (no timer at all for body-less traffic)
local function check(premature)
    armed = false
    if premature then
        return
    end
    deadlines(on_cut)
    if ndead > 0 and not armed then
        armed = ngx.timer.at(check_every, check) and true or false
    end
end

--- Call fn(tag, ip) for each request whose connection the deadline check ends; the check runs
-- every `interval` seconds while a deadline is pending.
function _M.deadline_check(fn, interval)
    on_cut, check_every = fn, interval
end

--- Give the request rid in slot n a deadline (Unix seconds): past it, the deadline check ends
-- the request's connection. r: the request (resty.core.base.get_request()).
function _M.deadline(n, rid, at, r)
    if l_rid[n] ~= rid or not r or not on_cut then
        return
    end
    if not l_dead[n] then
        ndead = ndead + 1
    end
    l_dead[n], l_req[n] = at, r
    if not armed then
        armed = ngx.timer.at(check_every, check) and true or false
    end
end

local function clear_deadline(n)
    if l_dead[n] then
        l_dead[n], l_req[n] = false, false
        ndead = ndead - 1
    end
end

-- End the client connection of request r: shutdown(2) of its socket, which nginx sees as the
-- client going away at its next read (the request ends as 400/499 through nginx's own path:
-- its log phase releases the slot and refunds it). The socket is not closed here: nginx
-- still owns the descriptor.
local function cut(r)
    local h = ffi.cast(req_head_t, r)
    if h.signature ~= HTTP_SIGNATURE or h.connection == nil then
        return false
    end
    local fd = ffi.cast(conn_head_t, h.connection).fd
    return fd >= 0 and ffi.C.shutdown(fd, SHUT_RDWR) == 0
end

--- End the connections of this worker's requests past their body deadline; cut_fn(tag, ip) is
-- called for each. Returns the number ended.
function deadlines(cut_fn)
    if ndead == 0 then
        return 0
    end
    local t, ended = now(), 0
    for n = 1, top do
        local d = l_dead[n]
        if d and t > d and l_rid[n] then
            local r = l_req[n]
            clear_deadline(n)
            if cut(r) then
                ended = ended + 1
                local _, tag = dict:get(l_key[n])
                cut_fn(tag, l_ip[n])
            end
        end
    end
    return ended
end
_M.deadlines = deadlines

--- Release the record in slot n if it still holds request rid (Property 20: a second call is a
-- no-op). Returns true when this call gave the slot back, false when the cleanup already had,
-- nil when slot n does not hold rid; and the seconds the request held the slot.
function _M.close(n, rid)
    if l_rid[n] ~= rid then
        return nil
    end
    local won = true
    if l_lost[n] or now() - l_seen[n] >= timeout / 2 then
        -- not refreshed for a while: the cleanup may be claiming it right now
        local ok, err = dict:add(claim_key(l_key[n], stamp(l_created[n], rid)), "released",
            CLAIM_TTL)
        won = ok or err ~= "exists"
    end
    dict:set(l_key[n], FREE)
    drop_side(n)
    clear_deadline(n)
    local held = now() - l_created[n]
    free_slot(n)
    return won, held
end

--- Refresh last_seen of this worker's records and its liveness (every heartbeat period).
function _M.heartbeat()
    local t = now()
    dict:set("wl:" .. generation, pid, LIVE_TTL)
    dict:set("wt:" .. generation, top)
    for n = 1, top do
        if l_rid[n] and not l_lost[n] then
            if dict:get(l_key[n]) ~= stamp(l_created[n], l_rid[n]) then
                l_lost[n] = true    -- the cleanup took it while this worker was stalled
            else
                dict:set(record.seen_key(generation, n), t)
                if not l_side[n] then
                    dict:safe_set(record.ip_key(generation, n), l_ip[n])
                    l_side[n] = true
                end
                l_seen[n] = t
            end
        end
    end
end

--- Test hook: set the last_seen of the request in slot n `age` seconds back, as if this worker
-- had been stalled that long (stalled), or had lost the request's log phase (the slot is then
-- neither released nor refreshed nor reused by this worker any more). Returns true and the
-- record's claim key, or false.
function _M.abandon(n, rid, age, stalled)
    if not n or l_rid[n] ~= rid then
        return false
    end
    local st = stamp(l_created[n], rid)
    if dict:get(l_key[n]) ~= st then
        l_lost[n] = true        -- the cleanup already took it: as the heartbeat would find
        return false
    end
    -- as a heartbeat `age` seconds ago (created_at stays: it names the request)
    local seen = now() - age
    dict:set(record.seen_key(generation, n), seen)
    dict:safe_set(record.ip_key(generation, n), l_ip[n])
    l_side[n], l_seen[n] = true, seen
    if not stalled then
        l_rid[n] = nil
    end
    return true, claim_key(l_key[n], st)
end

--- Test hook: as if this worker had died `age` seconds ago, right after opening the request in
-- slot n, before a heartbeat: the record is backdated by `age`, and this worker forgets the
-- request. Returns true and its claim key, or false when the slot does not hold rid or a
-- heartbeat already refreshed it.
function _M.orphan(n, rid, age)
    if not n or l_rid[n] ~= rid or l_side[n] then
        return false
    end
    local rec, tag = dict:get(l_key[n])
    if rec ~= stamp(l_created[n], rid) then
        return false
    end
    local st = rec - floor(age * 1000 + 0.5) * record.STAMP_IDS
    if not dict:replace(l_key[n], st, 0, tag) then
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
    local key = l_key[n] or record.key(generation, n)
    local rec, tag = dict:get(key)
    local full_id = generation .. "." .. rid
    local status = claim and dict:get(claim)
    local mine = l_rid[n] == rid
    -- the slot's request, or the last one of a slot this worker gave up (abandon, orphan)
    if type(rec) ~= "number" or rec == FREE or not (mine or l_rid[n] == nil)
            or not l_created[n] or rec ~= stamp(l_created[n], rid) then
        return { id = full_id, status = status or "released" }
    end
    local app, cluster = record.untag(tag)
    local created = stamp_time(rec)
    return { id = full_id, app = app, cluster = cluster, created_at = created,
             client_ip = mine and l_ip[n] or dict:get(record.ip_key(generation, n)) or "-",
             last_seen = tonumber(dict:get(record.seen_key(generation, n))) or created,
             status = status or "active" }
end

return _M
