-- l3_report: a node's consumption report for one app, applied at most once per (node, seq).
-- KEYS[1] l2 hash  KEYS[2] leases hash  KEYS[3] stats hash  KEYS[4] nodes zset
-- KEYS[5] the cluster's active zset, KEYS[6] its totals hash (both optional: the app is marked
-- active, and the cluster's total_consumed / total_requests grow with the app's)
-- ARGV[1] node_id  ARGV[2] seq  ARGV[3] consumed  ARGV[4] requests  ARGV[5] returned
-- ARGV[6] held (tokens the node still holds, minus its local debt)
-- ARGV[7] fail_open (optional: cost admitted from the local fail-open budget while Redis was
--         unavailable; counts as cluster consumption but not against the lease ledger)
-- ARGV[8] optional now (Unix microseconds; simulator only, default Redis TIME)
-- Returns {applied (1|0), last_seq[, 'unknown_app']}
-- Returned tokens go to the bucket's `returned_pending`, folded in by its next refill (which
-- needs the L1 hash to pay debt with what would overflow the burst).
local node = ARGV[1]
local seq = tonumber(ARGV[2])
if not seq or seq ~= seq or seq < 1 then
    return redis.error_reply('invalid_seq')
end
seq = math.floor(seq)
local consumed = math.floor(tonumber(ARGV[3]) or 0)
local requests = math.floor(tonumber(ARGV[4]) or 0)
local returned = math.floor(tonumber(ARGV[5]) or 0)
local held = math.floor(tonumber(ARGV[6]) or 0)
local fail_open = math.floor(tonumber(ARGV[7]) or 0)

if redis.call('EXISTS', KEYS[1]) == 0 then
    return {0, 0, 'unknown_app'}
end
local prev = redis.call('HMGET', KEYS[2], node .. ':seq', node .. ':held', node .. ':unreported')
local last = tonumber(prev[1]) or 0
if seq <= last then
    return {0, last}
end

local now = tg_now_us(ARGV[8])
local now_s = math.floor(now / 1000000)
-- held now covers every grant applied before this report: none is unreported any more
redis.call('HSET', KEYS[2], node .. ':seq', seq, node .. ':held', held, node .. ':unreported', 0)
-- what the node holds replaces what it held plus what it was granted since
local out = held - (tonumber(prev[2]) or 0) - (tonumber(prev[3]) or 0)
if out ~= 0 then
    redis.call('HINCRBY', KEYS[1], 'outstanding', out)
end
redis.call('ZADD', KEYS[4], now_s, node)
if KEYS[5] then
    redis.call('ZADD', KEYS[5], now_s, tg_app_of(KEYS[1]))
end
local totals = KEYS[6]
if totals and (consumed + fail_open ~= 0) then
    redis.call('HINCRBY', totals, 'total_consumed', consumed + fail_open)
end
if totals and requests ~= 0 then
    redis.call('HINCRBY', totals, 'total_requests', requests)
end
if consumed ~= 0 then
    redis.call('HINCRBY', KEYS[2], node .. ':consumed', consumed)
    redis.call('HINCRBY', KEYS[3], 'total_consumed', consumed)
    redis.call('HINCRBY', KEYS[3], 'period_consumed', consumed)
end
if requests ~= 0 then
    redis.call('HINCRBY', KEYS[3], 'total_requests', requests)
    redis.call('HINCRBY', KEYS[3], 'period_requests', requests)
end
if fail_open ~= 0 then
    redis.call('HINCRBY', KEYS[3], 'total_consumed', fail_open)
    redis.call('HINCRBY', KEYS[3], 'period_consumed', fail_open)
    redis.call('HINCRBY', KEYS[3], 'fail_open_consumed', fail_open)
end
redis.call('HSET', KEYS[3], 'last_report', now_s)

if returned > 0 then
    redis.call('HINCRBY', KEYS[2], node .. ':returned', returned)
    redis.call('HINCRBY', KEYS[1], 'returned_pending', returned)
    redis.call('HINCRBY', KEYS[1], 'total_returned', returned)
end
return {1, seq}
