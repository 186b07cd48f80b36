-- overload_set: record a cluster's measured usage (consumption / capacity) for the overload
-- reduction (Req 4.4, docs/design.md §3): above 90 % the refill factor of P1-P3 falls linearly
-- towards its emergency ratio, reached at 100 %; P0 is never reduced. The record expires after
-- ttl seconds, so a stopped control plane cannot leave a cluster reduced.
-- KEYS[1] l1 hash
-- ARGV[1] usage (>= 0)  ARGV[2] ttl_s  ARGV[3] optional now (Unix microseconds)
-- Returns {factor_p0, factor_p1, factor_p2, factor_p3} in thousandths; errors
-- `unknown_cluster`, `invalid_usage`, `invalid_ttl`.
local usage = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
if not usage or usage ~= usage or usage < 0 or usage > 1000 then
    return redis.error_reply('invalid_usage')
end
if not ttl or ttl ~= ttl or ttl <= 0 or ttl > 86400 then
    return redis.error_reply('invalid_ttl')
end
if not redis.call('HGET', KEYS[1], 'capacity') then
    return redis.error_reply('unknown_cluster')
end
local now_us = tg_now_us(ARGV[3])
local now_s = math.floor(now_us / 1000000)
redis.call('HSET', KEYS[1], 'overload_usage', string.format('%.6f', usage),
           'overload_until', now_s + math.ceil(ttl),
           'factor_changed_us', string.format('%d', now_us))
local out = {}
for p = 0, 3 do
    out[p + 1] = math.floor(tg_overload(p, usage) * 1000 + 0.5)
end
return out
