-- cluster_config: create or update a storage cluster's L1 capacity.
-- KEYS[1] l1 hash  KEYS[2] l1 apps zset (allocations)  KEYS[3] debtors set (optional: given its
-- placeholder member "", so that it always exists — l2_grant names it among its keys, and in a
-- Redis Cluster slot migration a script whose keys are not all on the importing node is refused)
-- ARGV[1] capacity (tokens/s)  ARGV[2] reserved_ratio
-- Returns {capacity, allocated, available}
local capacity = tonumber(ARGV[1])
local ratio = tonumber(ARGV[2])
if not capacity or capacity <= 0 or capacity >= 9007199254740992
        or capacity ~= math.floor(capacity) then
    return redis.error_reply('invalid_capacity')
end
if not ratio or ratio ~= ratio or ratio < 0 or ratio >= 1 then
    return redis.error_reply('invalid_reserved_ratio')
end
local allocated = 0
local z = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 2, #z, 2 do
    allocated = allocated + tonumber(z[i])
end
-- Property 11, the allocation cap of the config contract (docs/config-contract.md): guaranteed
-- quotas never exceed (1 - reserved_ratio) x capacity — a cluster over it already (stored
-- before) takes any change that does not lower its cap further
local limit = math.floor(capacity * (1 - ratio) + 1e-6)
if allocated > limit then
    local old_cap = tonumber(redis.call('HGET', KEYS[1], 'capacity'))
    local old_ratio = tonumber(redis.call('HGET', KEYS[1], 'reserved_ratio'))
    if not old_cap or not old_ratio or limit < math.floor(old_cap * (1 - old_ratio) + 1e-6) then
        return redis.error_reply('over_allocation')
    end
end
local borrowed = tonumber(redis.call('HGET', KEYS[1], 'borrowed')) or 0
local available = capacity - allocated - borrowed
redis.call('HSET', KEYS[1], 'capacity', capacity, 'reserved_ratio', ARGV[2],
           'allocated', allocated, 'available', available)
redis.call('HINCRBY', KEYS[1], 'alloc_rev', 1)
if KEYS[3] then
    redis.call('SADD', KEYS[3], '')
end
return {capacity, allocated, available}
