-- app_config: create or update an app's L2 configuration and its L1 allocation, atomically.
-- KEYS[1] l1 hash  KEYS[2] l1 apps zset  KEYS[3] l2 hash
-- ARGV[1] app_id  ARGV[2] guaranteed_quota  ARGV[3] burst_quota  ARGV[4] priority
-- ARGV[5] c_bw  ARGV[6] max_borrow  ARGV[7] enabled (1|0)
-- ARGV[8] optional now (Unix microseconds; simulator only, default Redis TIME)
-- Returns {allocated, available}. Runtime state (tokens, borrowed, debt) is kept; tokens are
-- capped at a lowered burst, and a new bucket starts full.
local capacity = tonumber(redis.call('HGET', KEYS[1], 'capacity'))
if not capacity then
    return redis.error_reply('unknown_cluster')
end
local MAX = 9007199254740992
-- a whole number in [lo, MAX), rejecting inf and nan that Redis' tonumber accepts
local function int_arg(v, lo)
    local n = tonumber(v)
    if not n or n ~= n or n < lo or n >= MAX or n ~= math.floor(n) then
        return nil
    end
    return n
end
local g = int_arg(ARGV[2], 1)
local burst = int_arg(ARGV[3], 1)
local prio = int_arg(ARGV[4], 0)
local cbw = int_arg(ARGV[5], 0)
local maxb = int_arg(ARGV[6], 0)
if not g then
    return redis.error_reply('invalid_guaranteed_quota')
end
if not burst then
    return redis.error_reply('invalid_burst_quota')
end
if burst < g then
    return redis.error_reply('burst_below_guaranteed')
end
if not prio or prio > 3 then
    return redis.error_reply('invalid_priority')
end
if not cbw then
    return redis.error_reply('invalid_c_bw')
end
if not maxb then
    return redis.error_reply('invalid_max_borrow')
end

-- Property 11, the allocation cap of the config contract (docs/config-contract.md): guaranteed
-- quotas never exceed (1 - reserved_ratio) x capacity — unless the cluster was over it already
-- and this write does not raise the app's quota (an excess stored before stays editable). The sum
-- of the others is the cluster's maintained `allocated` less this app's old quota (one ZSCORE,
-- not a walk of the allocation set: writes stay O(1) in the number of apps; l1_reconcile
-- recomputes the sum from the apps if it ever drifts).
local ratio = tonumber(redis.call('HGET', KEYS[1], 'reserved_ratio')) or 0
local old_g = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1])) or 0
local allocated = tonumber(redis.call('HGET', KEYS[1], 'allocated'))
if not allocated then -- a cluster hash from before the field was kept: sum once
    allocated = 0
    local z = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    for i = 2, #z, 2 do
        allocated = allocated + tonumber(z[i])
    end
end
local others = allocated - old_g
if others + g > math.floor(capacity * (1 - ratio) + 1e-6) and g > old_g then
    return redis.error_reply('over_allocation')
end

-- Refill at the old rate up to now (paying debt with what overflows), then apply the new config.
local now = tg_now_us(ARGV[8])
local b = tg_load_l2(KEYS[3])
local st
if b then
    st = tg_settle(b, KEYS[1], now)
    if b.tokens > burst then
        b.tokens = burst
    end
else
    st = tg_load_l1(KEYS[1], now)
    b = {tokens = burst, last = now, pending = 0, paid = 0}
end
b.prio = prio
tg_schedule(b, st) -- the factor of the new priority from now on
redis.call('HSET', KEYS[3], 'app_id', ARGV[1], 'guaranteed_quota', g, 'burst_quota', burst,
           'priority', prio, 'c_bw', cbw, 'max_borrow', maxb,
           'enabled', ARGV[7] == '1' and 1 or 0)
tg_save_l2(KEYS[3], b)

redis.call('ZADD', KEYS[2], g, ARGV[1])
allocated = others + g
local borrowed = tonumber(redis.call('HGET', KEYS[1], 'borrowed')) or 0
local available = capacity - allocated - borrowed
redis.call('HSET', KEYS[1], 'allocated', allocated, 'available', available)
redis.call('HINCRBY', KEYS[1], 'alloc_rev', 1) -- a chunked L1 check spanning this starts over
return {allocated, available}
