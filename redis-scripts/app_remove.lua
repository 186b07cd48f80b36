-- app_remove: take an app's allocation out of its cluster's L1 and delete its L2 bucket,
-- atomically and without reading the cluster's other apps (a delete costs the same with 100 or
-- 100,000 apps): allocated loses the app's guaranteed quota (its score in the allocation set),
-- borrowed what the app still owed, and available is recomputed from them. l1_reconcile
-- recomputes the sums from the apps if they ever drift.
-- The cluster's revisions move with the sums (alloc_rev always, borrow_rev when the app owed), so
-- that a chunked L1 check spanning the removal starts over instead of correcting from a tally
-- that still counted the app; the app leaves the reconcile job's active set and debtors.
-- KEYS[1] l1 hash  KEYS[2] l1 apps zset  KEYS[3] l2 hash  KEYS[4] active zset  KEYS[5] debtors set
-- ARGV[1] app_id
-- Returns {allocated, available, removed (1 when the app held an allocation or an L2 bucket)};
-- error `unknown_cluster`.
local capacity = tonumber(redis.call('HGET', KEYS[1], 'capacity'))
if not capacity then
    return redis.error_reply('unknown_cluster')
end
local g = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
local owed = tonumber(redis.call('HGET', KEYS[3], 'borrowed')) or 0
local removed = (g or redis.call('EXISTS', KEYS[3]) == 1) and 1 or 0
local v = redis.call('HMGET', KEYS[1], 'allocated', 'borrowed')
local allocated = tonumber(v[1])
if not allocated then -- a cluster hash from before the field was kept: sum once
    allocated = 0
    local z = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    for i = 2, #z, 2 do
        allocated = allocated + tonumber(z[i])
    end
end
local borrowed = tonumber(v[2]) or 0
allocated = allocated - (g or 0)
borrowed = borrowed - owed
if allocated < 0 then
    allocated = 0
end
if borrowed < 0 then
    borrowed = 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('SREM', KEYS[5], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'alloc_rev', 1)
if owed ~= 0 then
    redis.call('HINCRBY', KEYS[1], 'borrow_rev', 1)
end
local available = capacity - allocated - borrowed
redis.call('HSET', KEYS[1], 'allocated', allocated, 'borrowed', borrowed, 'available', available)
return {allocated, available, removed}
