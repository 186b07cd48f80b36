-- l2_grant: lease tokens from an app's L2 bucket to a gateway node, borrowing from L1 when the
-- bucket cannot cover `min` (Req 5, Property 5) and applying emergency ratios (Property 6).
-- KEYS[1] l2 hash  KEYS[2] leases hash  KEYS[3] nodes zset  KEYS[4] l1 hash (cluster state)
-- KEYS[5] the cluster's active zset, KEYS[6] its debtors set (both optional: the app is marked
-- active at every grant, and a debtor when it borrows; see internal/keys)
-- ARGV[1] node_id  ARGV[2] requested  ARGV[3] min (grant nothing unless at least this much)
-- ARGV[4] optional now (Unix microseconds; simulator only, default Redis TIME)
-- ARGV[5] optional id of this grant (unique per node and app); the last one is kept with its
--         amount in the leases hash (<node>:gid, <node>:gamt)
-- ARGV[6] optional id of an earlier grant whose reply the node never received (a timeout): if
--         it was applied and is the node's last, its amount is returned once as `recovered`
--         (the node adds it to its lease; it is counted as granted already)
-- ARGV[7] optional reserve: the part of `requested` the node asks for beyond what it needs now
--         (its lease's reserve target); it is cut to the node's share among the app's active
--         nodes, counted now: of half the burst, and of what L2 holds beyond `min` (the node
--         sized it with the count of its last reply, which is stale when many nodes start
--         serving the app together)
-- Returns {granted, tokens_left, rate_milli, burst, reason, active_nodes, emergency_until,
--          recovered, requested (after the cut of the reserve)}
local node = ARGV[1]
local requested = math.floor(tonumber(ARGV[2]) or 0)
local min_needed = math.floor(tonumber(ARGV[3]) or 0)
if requested < min_needed then
    requested = min_needed
end

local now = tg_now_us(ARGV[4])
local gid, lost = ARGV[5], ARGV[6]
local recovered = 0
if lost and lost ~= '' then
    local last = redis.call('HMGET', KEYS[2], node .. ':gid', node .. ':gamt')
    if last[1] == lost then
        recovered = tonumber(last[2]) or 0
        redis.call('HDEL', KEYS[2], node .. ':gid', node .. ':gamt')
    end
end
local b = tg_load_l2(KEYS[1])
if not b then
    return { 0, 0, 0, 0, 'unknown_app', 0, 0 }
end
if not b.enabled then
    return { 0, 0, 0, b.burst, 'app_disabled', 0, 0 }
end
local st = tg_settle(b, KEYS[4], now)
local ratio = st.em and tg_ratio(b.prio) or 1

-- this node is one of the app's active nodes (those with a grant in the last 10 s)
local now_s = math.floor(now / 1000000)
redis.call('ZADD', KEYS[3], now_s, node)
if KEYS[5] then
    redis.call('ZADD', KEYS[5], now_s, tg_app_of(KEYS[1]))
end
local active = redis.call('ZCOUNT', KEYS[3], now_s - 10, '+inf')
local reserve = math.floor(tonumber(ARGV[7]) or 0)
if reserve > 0 then
    local share = math.floor(b.burst / (2 * active))
    local spare = math.floor(b.tokens) - min_needed
    if spare >= 0 and math.floor(spare / active) < share then
        share = math.floor(spare / active) -- never all L2 holds: the others' first grants need some
    end
    if reserve > share then
        requested = math.max(min_needed, requested - (reserve - share))
    end
end

-- Borrow between `need` and `want` tokens from L1. Returns nil or a failure reason.
local function borrow(need, want)
    if b.max_borrow <= 0 then
        return 'app_exhausted'
    end
    local room = b.max_borrow - b.borrowed
    if need > room then
        return 'borrow_limit_exceeded'
    end
    if not st.capacity then
        return 'cluster_exhausted'
    end
    -- available - A >= reserved_ratio x capacity
    local pool = math.floor(st.available - st.ratio * st.capacity + 1e-6)
    if need > pool then
        return 'cluster_exhausted'
    end
    local a = math.min(want, room, pool)
    local debt = math.floor((6 * a + 4) / 5) -- ceil(1.2 A) in exact integer arithmetic
    redis.call('HINCRBY', KEYS[4], 'available', -a)
    redis.call('HINCRBY', KEYS[4], 'borrowed', a)
    redis.call('HINCRBY', KEYS[4], 'borrow_rev', 1)
    b.tokens = b.tokens + a
    b.borrowed = b.borrowed + a
    b.debt = b.debt + debt
    redis.call('HSET', KEYS[1], 'borrowed', string.format('%d', b.borrowed),
               'debt', string.format('%d', b.debt))
    redis.call('HINCRBY', KEYS[1], 'total_borrowed', a)
    redis.call('HINCRBY', KEYS[1], 'total_interest', debt - a)
    if KEYS[6] then
        redis.call('SADD', KEYS[6], tg_app_of(KEYS[1]))
    end
    return nil
end

local granted, reason = 0, 'ok'
local avail = math.floor(b.tokens)
if ratio <= 0 then
    reason = 'emergency_blocked'
elseif requested <= 0 then
    reason = 'app_exhausted' -- nothing asked, nothing granted
elseif avail >= min_needed and avail > 0 then
    granted = math.min(requested, avail)
elseif ratio < 1 then
    reason = 'emergency_quota_exceeded' -- P1/P2 in emergency: no loans beyond their share
else
    local need = math.max(min_needed, 1) - avail
    local why = borrow(need, requested - avail)
    if why then
        reason = why
    else
        granted = math.min(requested, math.floor(b.tokens))
    end
end
b.tokens = b.tokens - granted
tg_save_l2(KEYS[1], b)

if granted > 0 then
    redis.call('HINCRBY', KEYS[2], node .. ':granted', granted)
    redis.call('HINCRBY', KEYS[2], node .. ':unreported', granted)
    redis.call('HINCRBY', KEYS[1], 'total_granted', granted)
    redis.call('HINCRBY', KEYS[1], 'outstanding', granted)
end
if gid and gid ~= '' then
    redis.call('HSET', KEYS[2], node .. ':gid', gid, node .. ':gamt', granted)
end
return { granted, math.floor(b.tokens), math.floor(b.rate * b.factor * 1000), b.burst, reason,
         active, st.em and math.floor(st.em_until_us / 1000000) or 0, recovered, requested }
