-- leader_claim: take or renew the control plane's leader lock (one replica runs the jobs).
-- KEYS[1] lock key  ARGV[1] this replica's token  ARGV[2] ttl_ms
-- Returns 1 when this replica holds the lock (taken or renewed for ttl_ms), else 0.
local ttl = tonumber(ARGV[2])
if not ttl or ttl < 1 then
    return redis.error_reply('invalid_ttl')
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], math.floor(ttl))
    return 1
end
if cur then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', math.floor(ttl))
return 1
