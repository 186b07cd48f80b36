-- The three rule algorithms on a shared dict (distribution "node": one node's workers share
-- the counters). Every function takes the dict, the counter's key, the rule, the units of this
-- request, the time and the longest delay the caller accepts (throttle; 0 otherwise) and
-- returns admitted, delay (seconds the caller sleeps before proceeding; the admission is
-- already counted), retry_after (seconds, when refused), remaining and, for a sliding window
-- that slept itself, true. sleep(sec) and clock() are ngx.sleep and ngx.now in nginx.
--   fixed_window    one counter per window (incr), so a boundary may admit 2 x limit
--   sliding_window  N sub-window counters (incr); a request is counted against its own
--                   sub-window and the N before it, so every interval of window length admits
--                   at most `limit` (see sub_windows()).
--   token_bucket    GCRA: the theoretical arrival time under a short per-key lock.
-- Entries carry TTLs so high-cardinality user/IP counters expire. Pure Lua given a dict.
local floor = math.floor
local ceil = math.ceil

local _M = {}

--- Sub-windows of a sliding window: at least 10 (so a 1 s window moves in 100 ms steps), one
-- per second up to 60, then 60. Returns N and the sub-window length g = window / N.
--
-- Boundary property: a request at time t in sub-window c = floor(t / g) is admitted only if
-- the counts of sub-windows c-N .. c plus its units stay within the limit. Any interval
-- [a, a + W] with its last admission at t <= a + W has all its admissions in sub-windows
-- floor(a / g) >= floor((t - W) / g) = c - N up to c, all of which that last check counted:
-- the interval admitted at most `limit`.
function _M.sub_windows(window)
    local n = window
    if n < 10 then
        n = 10
    elseif n > 60 then
        n = 60
    end
    return n, window / n
end

local prev_cache, prev_n = {}, 0     -- per worker: key -> {sub-window, sum of the N before}

-- Sum of sub-windows c-N .. c-1 (immutable once past, so cached per worker per sub-window;
-- only an undo can lower them afterwards, which makes the cached sum conservative).
local function prev_sum(dict, key, c, n)
    local e = prev_cache[key]
    if e and e[1] == c then
        return e[2]
    end
    local s = 0
    for j = c - n, c - 1 do
        s = s + (dict:get(key .. ":" .. j) or 0)
    end
    if not e then
        if prev_n >= 20000 then
            prev_cache, prev_n = {}, 0
        end
        e = {}
        prev_cache[key] = e
        prev_n = prev_n + 1
    end
    e[1], e[2] = c, s
    return s
end

local function sliding_try(dict, key, limit, units, now, n, g, ttl)
    local c = floor(now / g)
    local bk = key .. ":" .. c
    local v = dict:incr(bk, units, 0, ttl)
    local total = prev_sum(dict, key, c, n) + v
    if total <= limit then
        return true, 0, limit - total
    end
    dict:incr(bk, -units)
    -- retry when enough of the oldest sub-windows have left the window
    local need = total - limit
    local freed = 0
    for j = c - n, c do
        freed = freed + (j == c and (v - units) or (dict:get(key .. ":" .. j) or 0))
        if freed >= need then
            return false, (j + n + 1) * g - now, 0
        end
    end
    return false, n * g, 0
end

function _M.sliding(dict, key, r, units, now, max_delay, sleep, clock)
    local n, g = _M.sub_windows(r.window)
    local ttl = r.window + 2 * g
    local ok, retry, remaining = sliding_try(dict, key, r.limit, units, now, n, g, ttl)
    if ok or retry > max_delay or units > r.limit then
        return ok, 0, retry, remaining
    end
    -- throttle: wait until the window has room, then check once more
    sleep(retry)
    ok, retry, remaining = sliding_try(dict, key, r.limit, units, clock(), n, g, ttl)
    return ok, 0, retry, remaining, true
end

function _M.fixed(dict, key, r, units, now, max_delay)
    local w = r.window
    local idx = floor(now / w)
    local bk = key .. ":" .. idx
    local v = dict:incr(bk, units, 0, w + 1)
    if v <= r.limit then
        return true, 0, 0, r.limit - v
    end
    dict:incr(bk, -units)
    local retry = (idx + 1) * w - now
    if retry <= max_delay then
        -- throttle: take the units from the next window and wait for it to start
        local nk = key .. ":" .. (idx + 1)
        local v2 = dict:incr(nk, units, 0, 2 * w + 1)
        if v2 <= r.limit then
            return true, retry, 0, r.limit - v2
        end
        dict:incr(nk, -units)
        retry = retry + w
    end
    return false, 0, retry, 0
end

-- A short lock around the GCRA read-modify-write (held for a get and a set, never across a
-- yield); it expires by itself should its holder die.
local function lock(dict, lk, sleep)
    for _ = 1, 200 do
        if dict:add(lk, true, 0.05) then
            return true
        end
    end
    for _ = 1, 50 do
        sleep(0.001)
        if dict:add(lk, true, 0.05) then
            return true
        end
    end
    return false
end

function _M.token(dict, key, r, units, now, max_delay, sleep)
    local t = r.window / r.limit            -- seconds per unit
    local tau = r.burst * t
    if units > r.burst then
        return false, 0, r.window, 0
    end
    local lk = key .. ":l"
    local locked = lock(dict, lk, sleep)
    local tat = dict:get(key) or now
    if tat < now then
        tat = now
    end
    local new = tat + units * t
    local allow_at = new - tau
    local delay = allow_at - now
    local ok = delay <= max_delay + 1e-9     -- float sums of t must not cost a token
    if ok then
        -- the key lives until the bucket is full again; absent means full
        dict:set(key, new, ceil(new - now) + 1)
    end
    if locked then
        dict:delete(lk)
    end
    if not ok then
        return false, 0, delay, 0
    end
    if delay < 0 then
        delay = 0
    end
    return true, delay, 0, floor((tau - (new - now)) / t)
end

return _M
