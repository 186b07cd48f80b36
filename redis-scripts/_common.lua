-- Prelude prepended by both loaders (lua/tollgate/scripts.lua and internal/scripts)
-- to every script of this directory. Time comes from Redis TIME, never from a node clock.

local function tg_now_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Load the refill state of an L2 bucket. Returns nil when the app has no config.
local function tg_load_l2(key)
    local v = redis.call('HMGET', key, 'guaranteed_quota', 'burst_quota', 'current_tokens',
                         'last_refill_us', 'refill_factor')
    if not v[1] then
        return nil
    end
    local b = {
        rate = tonumber(v[1]),
        burst = tonumber(v[2]),
        factor = tonumber(v[5]) or 1,
    }
    b.tokens = tonumber(v[3]) or b.burst
    b.last = tonumber(v[4])
    return b
end

-- Refill in place: tokens = min(burst, tokens + elapsed * rate * factor).
local function tg_refill(b, now_us)
    local last = b.last or now_us
    local elapsed = now_us - last
    if elapsed < 0 then
        elapsed = 0
    end
    local t = b.tokens + elapsed * b.rate * b.factor / 1000000
    if t > b.burst then
        t = b.burst
    end
    b.tokens = t
    b.last = now_us
end

local function tg_save_l2(key, b)
    redis.call('HSET', key, 'current_tokens', string.format('%.6f', b.tokens),
               'last_refill_us', string.format('%d', b.last))
end
