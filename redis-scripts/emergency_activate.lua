-- emergency_activate: put a cluster in emergency mode for `duration` seconds (Req 6). While
-- active, L2 grants apply the priority ratios P0 100 %, P1 50 %, P2 10 %, P3 0 % (Property 6) and
-- honour `emergency_until` themselves, so the mode ends even with the control plane down.
-- Activating an active cluster replaces its reason and end. Appends a history entry and
-- publishes {"cluster_id", "active", "until", "reason"} on the channel.
-- KEYS[1] l1 hash  KEYS[2] emergency history stream
-- ARGV[1] cluster_id  ARGV[2] duration_s  ARGV[3] reason  ARGV[4] source (manual|auto)
-- ARGV[5] actor  ARGV[6] channel  ARGV[7] optional now (Unix microseconds)
-- Returns {1 if it was inactive else 0, until}; errors `unknown_cluster`, `invalid_duration`,
-- `invalid_reason`, `invalid_source`.
local HISTORY_MAX = 1000
local duration = tonumber(ARGV[2])
local reason = ARGV[3] or ''
if not duration or duration ~= duration or duration < 1 or duration > 86400
        or duration ~= math.floor(duration) then
    return redis.error_reply('invalid_duration')
end
if #reason > 256 or reason:find('%c') then
    return redis.error_reply('invalid_reason')
end
for i = 4, 5 do
    local s = ARGV[i] or ''
    if #s > 128 or s:find('[^%w_%-]') then
        return redis.error_reply('invalid_source')
    end
end
if not redis.call('HGET', KEYS[1], 'capacity') then
    return redis.error_reply('unknown_cluster')
end
local now_us = tg_now_us(ARGV[7])
local now_s = math.floor(now_us / 1000000)
local v = redis.call('HMGET', KEYS[1], 'emergency_mode', 'emergency_until')
local was_active = v[1] == '1' and (tonumber(v[2]) or 0) > now_s
local until_s = now_s + duration
redis.call('HSET', KEYS[1], 'emergency_mode', 1, 'emergency_until', until_s,
           'emergency_reason', reason, 'emergency_since', now_s,
           'factor_changed_us', string.format('%d', now_us))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', HISTORY_MAX, '*', 'event',
           was_active and 'extend' or 'activate', 'reason', reason, 'source', ARGV[4],
           'actor', ARGV[5], 'at', now_s, 'until', until_s)
redis.call('PUBLISH', ARGV[6], cjson.encode({
    cluster_id = ARGV[1], active = true, ['until'] = until_s, reason = reason }))
return { was_active and 0 or 1, until_s }
