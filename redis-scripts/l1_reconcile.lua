-- l1_reconcile: restore a cluster's L1 invariant from its L2 buckets (Req 7.3, Property 7):
-- allocated = sum of guaranteed quotas (and the allocation zset matches them), borrowed = sum of
-- the apps' borrowed, available = capacity - allocated - borrowed. Counts a correction in
-- l1.correction_count when any of them was off.
-- KEYS[1] l1 hash  KEYS[2] l1 apps zset  KEYS[3..] the l2 hash of every app of the cluster
-- ARGV[1..] the app ids, in the order of KEYS[3..]
-- Returns {corrected (1|0), allocated, borrowed, available, old_allocated, old_borrowed,
-- old_available}; errors `unknown_cluster`, `stale_app_list` (an allocated app is missing from
-- the keys: nothing is changed, the caller lists the apps again).
if #ARGV ~= #KEYS - 2 then
    return redis.error_reply('invalid_arguments')
end
local capacity = tonumber(redis.call('HGET', KEYS[1], 'capacity'))
if not capacity then
    return redis.error_reply('unknown_cluster')
end
local given, quota = {}, {}
local allocated, borrowed = 0, 0
for i = 3, #KEYS do
    local app = ARGV[i - 2]
    given[app] = true
    local v = redis.call('HMGET', KEYS[i], 'guaranteed_quota', 'borrowed')
    local g = tonumber(v[1])
    if g then
        quota[app] = g
        allocated = allocated + g
        borrowed = borrowed + (tonumber(v[2]) or 0)
    end
end
local z = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #z, 2 do
    if not given[z[i]] then
        return redis.error_reply('stale_app_list')
    end
end
local corrected = 0
for i = 1, #z, 2 do
    if not quota[z[i]] then
        redis.call('ZREM', KEYS[2], z[i])
        corrected = 1
    end
end
for app, g in pairs(quota) do
    if tonumber(redis.call('ZSCORE', KEYS[2], app)) ~= g then
        redis.call('ZADD', KEYS[2], g, app)
        corrected = 1
    end
end
local available = capacity - allocated - borrowed
local old = redis.call('HMGET', KEYS[1], 'allocated', 'borrowed', 'available')
local oa, ob, ov = tonumber(old[1]) or 0, tonumber(old[2]) or 0, tonumber(old[3]) or 0
if oa ~= allocated or ob ~= borrowed or ov ~= available then
    redis.call('HSET', KEYS[1], 'allocated', allocated, 'borrowed', borrowed,
               'available', available)
    corrected = 1
end
if corrected == 1 then
    redis.call('HINCRBY', KEYS[1], 'correction_count', 1)
    redis.call('HINCRBY', KEYS[1], 'alloc_rev', 1)
end
return { corrected, allocated, borrowed, available, oa, ob, ov }
