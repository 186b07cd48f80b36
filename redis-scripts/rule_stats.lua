-- Add a gateway's rule counter deltas to the cumulative rule statistics in one round trip.
-- KEYS[1] = rule_stats; ARGV = field, delta, field, delta, ... (field "<rule_id>:<counter>")
-- Returns the number of fields incremented.
local n = 0
for i = 1, #ARGV - 1, 2 do
    local d = tonumber(ARGV[i + 1])
    if not d then
        return redis.error_reply('invalid_delta')
    end
    redis.call('HINCRBY', KEYS[1], ARGV[i], d)
    n = n + 1
end
return n
