-- l2_reconcile: one app's periodic reconciliation (Req 7, Properties 13, 14).
--  1. reap the leases of nodes that stopped reporting (last contact older than reap_after):
--     their held tokens return to L2 and their ledger fields are removed;
--  2. drift = |sum(granted - consumed - returned - held - unreported)| / sum(granted) over the
--     window since the last reconciliation (unreported: grants after the node's last report);
--     above the tolerance each node's ledger is corrected — unaccounted tokens return to L2 and
--     are booked as returned, over-accounted ones are taken from L2 and booked as granted —
--     and stats.correction_count counts it;
--  3. recount the tokens outstanding on the nodes (sum of held + unreported), then refill
--     (returned tokens in, debt repaid from what overflows);
--  4. restart the window: granted -= consumed + returned, consumed = returned = 0 per node, and
--     the stats period counters move to last_period_*.
--  5. the app stays in (or joins) the cluster's debtors set while it owes, and leaves the
--     cluster's active set once nothing is left to reconcile: no node left (all reaped), no
--     debt, nothing consumed in the window just closed, and no grant or report for reap_after.
-- KEYS[1] l2 hash  KEYS[2] leases hash  KEYS[3] nodes zset  KEYS[4] stats hash  KEYS[5] l1 hash
-- KEYS[6] active zset  KEYS[7] debtors set (both optional)
-- ARGV[1] tolerance (0.1 = 10 %)  ARGV[2] reap_after_s  ARGV[3] optional now (Unix microseconds)
-- Returns {drift_ppm, corrected (1|0), reaped_nodes, reaped_tokens, granted, imbalance, paid,
-- deactivated (1|0)}; {0, 0, 0, 0, 0, 0, 0, 0, 'unknown_app'} without L2 state (the app also
-- leaves the active and debtors sets); errors `invalid_tolerance`, `invalid_reap_after`.
local tol = tonumber(ARGV[1])
local reap_after = tonumber(ARGV[2])
if not tol or tol ~= tol or tol < 0 then
    return redis.error_reply('invalid_tolerance')
end
if not reap_after or reap_after ~= reap_after or reap_after <= 0 then
    return redis.error_reply('invalid_reap_after')
end
local now = tg_now_us(ARGV[3])
local now_s = math.floor(now / 1000000)
local b = tg_load_l2(KEYS[1])
if not b then
    if KEYS[7] then
        redis.call('ZREM', KEYS[6], tg_app_of(KEYS[1]))
        redis.call('SREM', KEYS[7], tg_app_of(KEYS[1]))
    end
    return { 0, 0, 0, 0, 0, 0, 0, 0, 'unknown_app' }
end

local FIELDS = { 'granted', 'consumed', 'returned', 'held', 'seq', 'unreported', 'gid', 'gamt' }
local led = {}
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do
    local node, f = flat[i]:match('^(.+):([%a_]+)$')
    if node then
        led[node] = led[node] or {}
        led[node][f] = tonumber(flat[i + 1]) or 0
    end
end

-- 1. reap
local reaped, reaped_tokens = 0, 0
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now_s - reap_after))
for _, node in ipairs(stale) do
    local l = led[node]
    if l then
        local held = l.held or 0
        if held > 0 then
            b.pending = b.pending + held
            reaped_tokens = reaped_tokens + held
        end
        local del = {}
        for j, f in ipairs(FIELDS) do
            del[j] = node .. ':' .. f
        end
        redis.call('HDEL', KEYS[2], unpack(del))
        led[node] = nil
    end
    redis.call('ZREM', KEYS[3], node)
    reaped = reaped + 1
end
if reaped_tokens > 0 then
    redis.call('HINCRBY', KEYS[1], 'total_returned', reaped_tokens)
end

-- 2. drift and correction
local granted, imbalance = 0, 0
for _, l in pairs(led) do
    local g = l.granted or 0
    l.d = g - (l.consumed or 0) - (l.returned or 0) - (l.held or 0) - (l.unreported or 0)
    granted = granted + g
    imbalance = imbalance + l.d
end
local drift = 0
if granted > 0 then
    drift = math.abs(imbalance) / granted
elseif imbalance ~= 0 then
    drift = 1
end
local corrected = 0
if drift > tol then
    corrected = 1
    for node, l in pairs(led) do
        if l.d > 0 then
            -- what went missing is back in L2: a node must not recover its last grant too
            redis.call('HDEL', KEYS[2], node .. ':gid', node .. ':gamt')
            redis.call('HINCRBY', KEYS[2], node .. ':returned', l.d)
            l.returned = (l.returned or 0) + l.d
            b.pending = b.pending + l.d
        elseif l.d < 0 then
            redis.call('HINCRBY', KEYS[2], node .. ':granted', -l.d)
            b.tokens = b.tokens + l.d
        end
    end
    redis.call('HINCRBY', KEYS[4], 'correction_count', 1)
    redis.call('HSET', KEYS[4], 'last_correction', imbalance, 'last_correction_at', now_s)
end

-- 3. refill, with the outstanding tokens recounted from the ledger
local outstanding = 0
for _, l in pairs(led) do
    outstanding = outstanding + (l.held or 0) + (l.unreported or 0)
end
b.outstanding = outstanding
redis.call('HSET', KEYS[1], 'outstanding', outstanding)
tg_settle(b, KEYS[5], now)
tg_save_l2(KEYS[1], b)

-- 4. new window
for node, l in pairs(led) do
    local done = (l.consumed or 0) + (l.returned or 0)
    if done ~= 0 then
        redis.call('HINCRBY', KEYS[2], node .. ':granted', -done)
        redis.call('HSET', KEYS[2], node .. ':consumed', 0, node .. ':returned', 0)
    end
end
local p = redis.call('HMGET', KEYS[4], 'period_consumed', 'period_requests')
redis.call('HSET', KEYS[4], 'last_period_consumed', tonumber(p[1]) or 0,
           'last_period_requests', tonumber(p[2]) or 0, 'period_consumed', 0,
           'period_requests', 0, 'last_reconcile', now_s,
           'last_drift_ppm', math.floor(drift * 1000000))

-- 5. the cluster's indexes
local deactivated = 0
if KEYS[7] then
    local app = tg_app_of(KEYS[1])
    if b.debt > 0 then
        redis.call('SADD', KEYS[7], app)
    end
    local seen = tonumber(redis.call('ZSCORE', KEYS[6], app))
    if seen and seen < now_s - reap_after and b.debt <= 0 and corrected == 0
            and (tonumber(p[1]) or 0) == 0 and (tonumber(p[2]) or 0) == 0
            and redis.call('ZCARD', KEYS[3]) == 0 then
        redis.call('ZREM', KEYS[6], app)
        deactivated = 1
    end
end
local ppm = math.floor(drift * 1000000)
return { ppm, corrected, reaped, reaped_tokens, granted, imbalance, b.paid, deactivated }
