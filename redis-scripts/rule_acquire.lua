-- Lease of a global rule's capacity (docs/rules-contract.md §2, distribution "global"): grant up to
-- `requested` units (all-or-nothing below `min`) from the counter of one rule and scope key.
-- KEYS[1] = rule_counter(rule_id) .. <alg>:<scope key> (a hash)
-- ARGV = algorithm, limit, window_s, burst, requested, min[, now_us]
-- Returns {granted, valid_ms, retry_ms, remaining}: the lease may be spent for valid_ms (the
-- rest of the window, sub-window, or 100 ms of a token bucket); retry_ms says when `min`
-- could be granted if nothing was.
local key = KEYS[1]
local alg = ARGV[1]
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local requested = tonumber(ARGV[5])
local min = tonumber(ARGV[6])
if not limit or limit < 1 or not window or window < 1 or not requested or not min
        or min < 1 or requested < min then
    return redis.error_reply('invalid_arguments')
end
local now_us = tg_now_us(ARGV[7])
local now_ms = math.floor(now_us / 1000)
local w_ms = window * 1000

local function grant(avail)
    if avail < min then
        return 0
    end
    if requested < avail then
        return requested
    end
    return avail
end

if alg == 'fixed_window' then
    local idx = math.floor(now_ms / w_ms)
    local v = redis.call('HMGET', key, 'w', 'n')
    local used = 0
    if tonumber(v[1]) == idx then
        used = tonumber(v[2]) or 0
    end
    local g = grant(limit - used)
    local left = (idx + 1) * w_ms - now_ms
    redis.call('HSET', key, 'w', idx, 'n', used + g)
    redis.call('PEXPIRE', key, left + 1000)
    return { g, left, g == 0 and left or 0, limit - used - g }
elseif alg == 'sliding_window' then
    -- the same sub-windows as the gateway's node algorithm (rules_local.sub_windows)
    local n = window
    if n < 10 then
        n = 10
    elseif n > 60 then
        n = 60
    end
    local g_ms = w_ms / n
    local c = math.floor(now_ms / g_ms)
    local fields = {}
    for j = c - n, c do
        fields[#fields + 1] = 'b' .. j
    end
    local v = redis.call('HMGET', key, unpack(fields))
    local sum = 0
    for i = 1, #v do
        sum = sum + (tonumber(v[i]) or 0)
    end
    local g = grant(limit - sum)
    if g > 0 then
        redis.call('HINCRBY', key, 'b' .. c, g)
    end
    if redis.call('HLEN', key) > n + 3 then
        for _, f in ipairs(redis.call('HKEYS', key)) do
            local j = tonumber(string.sub(f, 2))
            if not j or j < c - n then
                redis.call('HDEL', key, f)
            end
        end
    end
    redis.call('PEXPIRE', key, math.ceil(w_ms + 2 * g_ms) + 1000)
    local left = math.floor((c + 1) * g_ms - now_ms)
    local retry = 0
    if g == 0 then
        -- the oldest sub-windows leave the window one by one until `min` fits
        local need, freed = sum + min - limit, 0
        retry = math.ceil(w_ms)
        for i = 1, #v do
            freed = freed + (tonumber(v[i]) or 0)
            if freed >= need then
                retry = math.ceil((c + i) * g_ms - now_ms)
                break
            end
        end
    end
    return { g, left, retry, limit - sum - g }
elseif alg == 'token_bucket' then
    if not burst or burst < 1 then
        return redis.error_reply('invalid_arguments')
    end
    local rate = limit / w_ms       -- units per ms
    local v = redis.call('HMGET', key, 'tokens', 'last_ms')
    local tokens = tonumber(v[1]) or burst
    local last = tonumber(v[2]) or now_ms
    if now_ms > last then
        tokens = tokens + (now_ms - last) * rate
        if tokens > burst then
            tokens = burst
        end
        last = now_ms
    end
    local g = grant(math.floor(tokens))
    tokens = tokens - g
    redis.call('HSET', key, 'tokens', string.format('%.6f', tokens), 'last_ms', last)
    redis.call('PEXPIRE', key, math.ceil((burst - tokens) / rate) + 1000)
    local retry = 0
    if g == 0 then
        retry = math.ceil((min - tokens) / rate)
    end
    return { g, 100, retry, math.floor(tokens) }
end
return redis.error_reply('invalid_algorithm')
