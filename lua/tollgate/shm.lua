-- Shared-dict layout of the local tier (L3): per-app key names (built once per app per worker)
-- and the atomic primitives every module uses on them.
local dict = ngx.shared.ratelimit

local _M = { dict = dict }

local cache = {}
local cache_n = 0

--- Local key names of app `id` (seed 000's `app:{id}:…` layout).
function _M.keys(id)
    local k = cache[id]
    if k then
        return k
    end
    local p = "app:" .. id .. ":"
    k = {
        tokens = p .. "tokens",                 -- lease held by this node
        pending_cost = p .. "pending_cost",     -- consumption not yet reported
        pending_count = p .. "pending_count",   -- requests not yet reported
        debt = p .. "debt",                     -- post-hoc charges the lease could not cover
        target = p .. "target",                 -- adaptive reserve target
        neg = p .. "neg",                       -- negative cache: reset time while exhausted
        neg_reason = p .. "neg_reason",         -- the reason L2 gave
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

--- Take up to `amount` from counter `key` without leaving it negative; returns what was taken.
-- Works under concurrency: an overdraw is given back by the operation that caused it.
function _M.take(key, amount)
    if amount <= 0 then
        return 0
    end
    local v = dict:incr(key, -amount, 0)
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
    dict:incr(key, back)
    return amount - back
end

--- Take exactly `amount` or nothing.
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
