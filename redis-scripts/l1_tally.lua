-- l1_tally: one chunk of a cluster's L1 check spread over the reconcile job's ticks (Property 7):
-- for a page of the allocation set's apps it makes each app's allocation entry match its L2
-- bucket (an app without L2 state leaves the set, a stale quota is rewritten) and returns the
-- sums of their guaranteed quotas and borrowed tokens. The job adds up the pages of one pass
-- over the allocation set and hands the sums to l1_correct. A rewritten entry bumps the L1
-- hash's alloc_rev, so the pass it belongs to is not used (the next one sees the fixed set).
-- KEYS[1] l1 hash  KEYS[2] l1 apps zset  KEYS[3..] the l2 hash of each app of the page
-- ARGV[1..] the app ids, in the order of KEYS[3..]
-- Returns {allocated, borrowed, fixed}.
if #ARGV ~= #KEYS - 2 then
    return redis.error_reply('invalid_arguments')
end
local allocated, borrowed, fixed = 0, 0, 0
for i = 3, #KEYS do
    local app = ARGV[i - 2]
    local v = redis.call('HMGET', KEYS[i], 'guaranteed_quota', 'borrowed')
    local g = tonumber(v[1])
    local z = tonumber(redis.call('ZSCORE', KEYS[2], app))
    if not g then
        if z then
            redis.call('ZREM', KEYS[2], app)
            fixed = fixed + 1
        end
    else
        if z ~= g then
            redis.call('ZADD', KEYS[2], g, app)
            fixed = fixed + 1
        end
        allocated = allocated + g
        borrowed = borrowed + (tonumber(v[2]) or 0)
    end
end
if fixed > 0 then
    redis.call('HINCRBY', KEYS[1], 'alloc_rev', 1)
end
return { allocated, borrowed, fixed }
