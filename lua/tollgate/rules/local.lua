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
--   token_bucket    GCRA in integer token time, lock-free (see token()).
-- Entries carry TTLs so high-cardinality user/IP counters expire. Pure Lua given a dict.
--
-- Worker chunks (the cost of a rule is one shared-dict operation, ~700 instructions, so a
-- busy rule must not pay it on every request): when a rule's limit is large (chunk() > 0), a
-- worker reserves its request's units plus a chunk in the shared counter with the same single
-- atomic operation and spends the chunk locally, without touching the dict:
--   windows  a chunk belongs to the (sub-)window it was counted in and is only spent there;
--            the shared counter holds every reserved unit, so admissions in a (sub-)window
--            never exceed what the checks allowed (the limit is never exceeded; the sliding
--            proof below holds unchanged). A sliding worker gives the unspent rest back when
--            its sub-window ends. Close to the limit (less than workers x chunk left) nobody
--            takes chunks any more, so a refusal happens only when the shared count is full
--            but for what other workers still hold (at most one chunk each, at most
--            workers x limit / 1024 in all).
--   token    a chunk is only spent at the same clock reading (ngx.now(), 1 ms, the clock the
--            bucket runs on) as it was taken, so the admissions are exactly the reservations;
--            the unspent rest is returned to the bucket with the next reservation.
-- Limits below 1024 units (and throttled requests) take no chunks: exactly one check per
-- request against the shared state, as without chunks.
local chunks = require("tollgate.rules.chunks")
local token = require("tollgate.rules.token")

local floor = math.floor
local chunk = chunks.chunk
local new_state = chunks.new_state

local _M = {
    set_workers = chunks.set_workers,   -- number of workers sharing the dict
    set_state = chunks.set_state,       -- replace this worker's local state (tests)
    chunk = chunks.chunk,
    mulmod = token.mulmod,
    emitted = token.emitted,
    token = token.token,
}

--- Sub-windows of a sliding window: at least 10 (so a 1 s window moves in 100 ms steps), one
-- per second up to 60, then 60. Returns N and the sub-window length g = window / N.
--
-- Boundary property: a request at time t in sub-window c = floor(t / g) is admitted only if
-- the counts of sub-windows c-N .. c plus its units stay within the limit. Any interval
-- [a, a + W] with its last admission at t <= a + W has all its admissions in sub-windows
-- floor(a / g) >= floor((t - W) / g) = c - N up to c, all of which that last check counted:
-- the interval admitted at most `limit`. (With chunks: the admissions in sub-window c are at
-- most its reserved units, all of which the last successful reservation in c counted.)
function _M.sub_windows(window)
    local n = window
    if n < 10 then
        n = 10
    elseif n > 60 then
        n = 60
    end
    return n, window / n
end

-- Local state of counter `key`: {window index, units held, key of that window's counter,
-- sum of the N sub-windows before it (sliding), no-more-chunks flag}.
local function state(key)
    local st = chunks.get(key)
    if not st then
        st = new_state(key, { false, 0, false, 0, false })
    end
    return st
end

-- Sum of sub-windows c-N .. c-1 (immutable once past but for give-backs, which only lower
-- them: a sum read earlier is conservative).
local function prev_sum(dict, key, c, n)
    local s = 0
    for j = c - n, c - 1 do
        s = s + (dict:get(key .. ":" .. j) or 0)
    end
    return s
end

-- Move st to sub-window (or window) c: give back the units held of the previous one
-- (sliding only: a fixed window's old counter no longer matters) and read the sums.
local function roll(dict, key, st, c, n, give_back)
    if give_back and st[2] > 0 and st[1] then
        dict:incr(st[3], -st[2])
    end
    st[1], st[2], st[3], st[5] = c, 0, key .. ":" .. c, false
    if n then
        st[4] = prev_sum(dict, key, c, n)
    end
end

-- One reservation of `units` (+ a chunk when allowed) in counter bk whose other counted
-- units are `base`. Returns admitted and the count after it.
local function reserve(dict, st, bk, base, limit, units, ch, ttl)
    local take = units
    if ch > 0 and not st[5] then
        take = units + ch
    end
    local v = dict:incr(bk, take, 0, ttl)
    local total = base + v
    if total <= limit - chunks.workers() * (take - units) then
        st[2] = st[2] + take - units
        return true, total
    end
    if total - take + units <= limit then
        -- close to the limit: keep no chunk, from now on one exact check per request
        if take > units then
            dict:incr(bk, units - take)
            st[5] = true
        end
        return true, total - take + units
    end
    dict:incr(bk, -take)
    st[5] = true
    return false, total - take + units
end

local function sliding_try(dict, key, limit, units, now, n, g, ttl, ch)
    local c = floor(now / g)
    local st = state(key)
    if st[1] ~= c then
        roll(dict, key, st, c, n, true)
    end
    if st[2] >= units then
        st[2] = st[2] - units
        return true, 0, 0
    end
    local ok, total = reserve(dict, st, st[3], st[4], limit, units, ch, ttl)
    if ok then
        return true, 0, limit - total
    end
    -- retry when enough of the oldest sub-windows have left the window
    local need = total - limit
    local freed = 0
    local v = total - st[4] - units     -- this sub-window's count without this request
    for j = c - n, c do
        freed = freed + (j == c and v or (dict:get(key .. ":" .. j) or 0))
        if freed >= need then
            return false, (j + n + 1) * g - now, 0
        end
    end
    return false, n * g, 0
end

function _M.sliding(dict, key, r, units, now, max_delay, sleep, clock)
    local n, g = r.sw_n, r.sw_g
    if not n then
        n, g = _M.sub_windows(r.window)
        r.sw_n, r.sw_g = n, g
    end
    local ttl = r.window + 2 * g
    local ch = max_delay > 0 and 0 or chunk(r)
    local ok, retry, remaining = sliding_try(dict, key, r.limit, units, now, n, g, ttl, ch)
    if ok or retry > max_delay or units > r.limit then
        return ok, 0, retry, remaining
    end
    -- throttle: wait until the window has room, then check once more
    sleep(retry)
    ok, retry, remaining = sliding_try(dict, key, r.limit, units, clock(), n, g, ttl, 0)
    return ok, 0, retry, remaining, true
end

function _M.fixed(dict, key, r, units, now, max_delay)
    local w = r.window
    local idx = floor(now / w)
    local st = state(key)
    if st[1] ~= idx then
        roll(dict, key, st, idx, nil, false)
    end
    if st[2] >= units then
        st[2] = st[2] - units
        return true, 0, 0, 0
    end
    local ok, total = reserve(dict, st, st[3], 0, r.limit, units,
        max_delay > 0 and 0 or chunk(r), w + 1)
    if ok then
        return true, 0, 0, r.limit - total
    end
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

return _M
