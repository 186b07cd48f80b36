-- l1_correct: the end of a chunked L1 check (see l1_tally): sets allocated, borrowed and
-- available = capacity - allocated - borrowed from the sums of one pass over the cluster's
-- apps, but only what the pass could see whole: nothing when an allocation changed since the
-- pass began (alloc_rev moved: the sums mix old and new quotas), and not `borrowed` when a loan
-- or a repayment happened meanwhile (borrow_rev moved; the L1 value is kept, checked by a quieter
-- pass). Counts a correction in correction_count.
-- KEYS[1] l1 hash
-- ARGV[1] alloc_rev and ARGV[2] borrow_rev read when the pass began
-- ARGV[3] allocated  ARGV[4] borrowed (the pass's sums)
-- Returns {applied (1|0), corrected (1|0), allocated, borrowed, available, old_allocated,
-- old_borrowed, old_available, borrowed_checked (1|0)}; error `unknown_cluster`.
local v = redis.call('HMGET', KEYS[1], 'capacity', 'alloc_rev', 'borrow_rev', 'allocated',
                     'borrowed', 'available')
local capacity = tonumber(v[1])
if not capacity then
    return redis.error_reply('unknown_cluster')
end
local oa, ob, ov = tonumber(v[4]) or 0, tonumber(v[5]) or 0, tonumber(v[6]) or 0
if (tonumber(v[2]) or 0) ~= tonumber(ARGV[1]) then
    return { 0, 0, oa, ob, ov, oa, ob, ov, 0 }
end
local allocated = tonumber(ARGV[3])
local borrowed, checked = ob, 0
if (tonumber(v[3]) or 0) == tonumber(ARGV[2]) then
    borrowed, checked = tonumber(ARGV[4]), 1
end
local available = capacity - allocated - borrowed
local corrected = 0
if oa ~= allocated or ob ~= borrowed or ov ~= available then
    redis.call('HSET', KEYS[1], 'allocated', allocated, 'borrowed', borrowed,
               'available', available)
    redis.call('HINCRBY', KEYS[1], 'correction_count', 1)
    redis.call('HINCRBY', KEYS[1], 'alloc_rev', 1)
    corrected = 1
end
return { 1, corrected, allocated, borrowed, available, oa, ob, ov, checked }
