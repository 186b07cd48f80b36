-- Shared-dict layout of the local tier (L3): per-app key names (built once per app per worker)
-- and the atomic primitives every module uses on them.
local dict = ngx.shared.ratelimit

local _M = { dict = dict }

local cache = {}
local cache_n = 0

--- Local key names of app `id` (the layout of docs/design.md §4).
function _M.keys(id)
    local k = cache[id]
    if k then
        return k
    end
    local p = "app:" .. id .. ":"
    k = {
        id = id,
        tokens = p .. "tokens",                 -- lease held by this node
        pending = p .. "pending",               -- lease admissions not yet reported (packed)
        pending_cost = p .. "pending_cost",     -- other consumption not yet reported
        pending_count = p .. "pending_count",   -- requests not yet reported (spilled)
        debt = p .. "debt",                     -- post-hoc charges the lease could not cover
        target = p .. "target",                 -- adaptive reserve target
        neg = p .. "neg",                       -- negative cache: reset time while exhausted
        neg_reason = p .. "neg_reason",         -- the reason L2 gave
        neg_need = p .. "neg_need",             -- the smallest need L2 refused meanwhile
        scarce = p .. "scarce",                 -- L2 could not fill the last request
        nodes = p .. "nodes",                   -- active nodes of the app, from the last grant
        refill_lock = p .. "refill_lock",
        sync_lock = p .. "sync_lock",
        seq = p .. "seq",                       -- last report sequence number
        inflight = p .. "inflight",             -- report sent but not yet acknowledged
        reported = p .. "reported",             -- total cost reported (rate estimation)
        rollback_count = p .. "rollback_count",
        fail_open = p .. "fail_open",           -- cost admitted while Redis was unavailable
        give_back = p .. "give_back",           -- tokens taken from the lease, due back to L2
    }
    if cache_n > 50000 then
        cache, cache_n = {}, 0
    end
    cache[id] = k
    cache_n = cache_n + 1
    return k
end

-- Unreported consumption. An admission from the lease moves the cost and the request count
-- in one `incr` of the packed counter `pending` = cost * 2^20 + count, whose count part is read
-- as a signed number in [-2^19, 2^19) (rollbacks subtract). Post-hoc charges and refunds go to
-- `pending_cost`, and a packed value about to leave the exact range spills its parts into
-- `pending_cost` / `pending_count`; a report takes all three.
local PACK = 1048576
local HALF = 524288
_M.PACK = PACK

--- cost, count of packed pending value p
local function unpack_pending(p)
    local n = p % PACK
    if n >= HALF then
        n = n - PACK
    end
    return (p - n) / PACK, n
end
_M.unpack_pending = unpack_pending

-- spill when the count part leaves [0, 2^18) or the cost part |c| reaches 2^30 (doubles stay
-- exact up to 2^53 = 2^33 * 2^20)
local SPILL_COUNT = 262144
local SPILL_ABS = 2 ^ 50

--- Count an admission (cost, +1) or its rollback (-cost, -1). Returns the requests pending.
function _M.add_pending(k, cost, count)
    local p = dict:incr(k.pending, cost * PACK + count, 0)
    if not p then
        return 0
    end
    local n = p % PACK
    if n < SPILL_COUNT and p < SPILL_ABS and p > -SPILL_ABS then
        return n
    end
    -- move exactly what this incr saw; concurrent increments stay in the packed counter
    local c
    c, n = unpack_pending(p)
    dict:incr(k.pending, -p, 0)
    dict:incr(k.pending_cost, c, 0)
    return dict:incr(k.pending_count, n, 0) or 0
end

--- Take all unreported consumption of app keys k: cost, count (zero, zero when none).
function _M.take_pending(k)
    local p = dict:get(k.pending) or 0
    local pc = dict:get(k.pending_cost) or 0
    local pn = dict:get(k.pending_count) or 0
    if p ~= 0 then
        dict:incr(k.pending, -p)
    end
    if pc ~= 0 then
        dict:incr(k.pending_cost, -pc)
    end
    if pn ~= 0 then
        dict:incr(k.pending_count, -pn)
    end
    local c, n = unpack_pending(p)
    return pc + c, pn + n
end

--- Unreported consumption of app keys k without taking it: cost, count.
function _M.peek_pending(k)
    local c, n = unpack_pending(dict:get(k.pending) or 0)
    return c + (dict:get(k.pending_cost) or 0), n + (dict:get(k.pending_count) or 0)
end

--- Take up to `amount` from counter `key` of shared dict `store` (the ratelimit dict when nil)
-- without leaving it negative; returns what was taken. Works under concurrency: an
-- overdraw is given back by the operation that caused it.
function _M.take(key, amount, store)
    if amount <= 0 then
        return 0
    end
    store = store or dict
    local v = store:incr(key, -amount, 0)
    if not v then
        return 0
    end
    if v >= 0 then
        return amount
    end
    local back = -v
    if back > amount then
        back = amount
    end
    store:incr(key, back)
    return amount - back
end

--- Take exactly `amount` from counter `key` of the ratelimit dict, or nothing.
function _M.take_all_or_nothing(key, amount)
    local v = dict:incr(key, -amount, 0)
    if v and v >= 0 then
        return true, v
    end
    if v then
        dict:incr(key, amount)
    end
    return false
end

return _M
