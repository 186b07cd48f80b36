-- emergency_deactivate: end a cluster's emergency mode (manually, or once expired), append a
-- history entry and publish {"cluster_id", "active": false, "until": 0, "reason"}.
-- KEYS[1] l1 hash  KEYS[2] emergency history stream
-- ARGV[1] cluster_id  ARGV[2] reason  ARGV[3] source (manual|auto|expired)  ARGV[4] actor
-- ARGV[5] channel  ARGV[6] only_if_expired (1|0)  ARGV[7] optional now (Unix microseconds)
-- Returns {1 if it ended an emergency else 0, until}: nothing changes when the mode is off, or
-- when only_if_expired is 1 and it has not expired yet. Errors `invalid_reason`, `invalid_source`.
local HISTORY_MAX = 1000
local reason = ARGV[2] or ''
if #reason > 256 or reason:find('%c') then
    return redis.error_reply('invalid_reason')
end
for i = 3, 4 do
    local s = ARGV[i] or ''
    if #s > 128 or s:find('[^%w_%-]') then
        return redis.error_reply('invalid_source')
    end
end
local now_us = tg_now_us(ARGV[7])
local now_s = math.floor(now_us / 1000000)
local v = redis.call('HMGET', KEYS[1], 'emergency_mode', 'emergency_until')
local until_s = tonumber(v[2]) or 0
if v[1] ~= '1' then
    return { 0, 0 }
end
if ARGV[6] == '1' and until_s > now_s then
    return { 0, until_s }
end
redis.call('HSET', KEYS[1], 'emergency_mode', 0, 'emergency_until', 0, 'emergency_reason', '',
           'factor_changed_us', string.format('%d', now_us))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', HISTORY_MAX, '*', 'event', 'deactivate',
           'reason', reason, 'source', ARGV[3], 'actor', ARGV[4], 'at', now_s,
           'until', until_s)
redis.call('PUBLISH', ARGV[5], cjson.encode({
    cluster_id = ARGV[1], active = false, ['until'] = 0, reason = reason }))
return { 1, until_s }
