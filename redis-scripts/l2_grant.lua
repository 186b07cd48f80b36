-- l2_grant: lease tokens from an app's L2 bucket to a gateway node.
-- KEYS[1] l2 hash  KEYS[2] leases hash  KEYS[3] nodes zset  KEYS[4] l1 hash (cluster state)
-- ARGV[1] node_id  ARGV[2] requested  ARGV[3] min (grant nothing unless at least this much)
-- Returns {granted, tokens_left, rate_milli, burst, reason, active_nodes}
local node = ARGV[1]
local requested = math.floor(tonumber(ARGV[2]) or 0)
local min_needed = math.floor(tonumber(ARGV[3]) or 0)
if requested < min_needed then
    requested = min_needed
end

local now = tg_now_us()
local b = tg_load_l2(KEYS[1])
if not b then
    return {0, 0, 0, 0, 'unknown_app', 0}
end
if redis.call('HGET', KEYS[1], 'enabled') == '0' then
    return {0, 0, 0, b.burst, 'app_disabled', 0}
end
tg_refill(b, now)

local avail = math.floor(b.tokens)
local granted = requested
if granted > avail then
    granted = avail
end
local reason = 'ok'
if granted < min_needed or granted <= 0 then
    granted = 0
    reason = 'app_exhausted'
end
b.tokens = b.tokens - granted
tg_save_l2(KEYS[1], b)

local now_s = math.floor(now / 1000000)
redis.call('ZADD', KEYS[3], now_s, node)
if granted > 0 then
    redis.call('HINCRBY', KEYS[2], node .. ':granted', granted)
    redis.call('HINCRBY', KEYS[1], 'total_granted', granted)
end
local active = redis.call('ZCOUNT', KEYS[3], now_s - 10, '+inf')
return {granted, math.floor(b.tokens), math.floor(b.rate * b.factor * 1000), b.burst, reason,
        active}
