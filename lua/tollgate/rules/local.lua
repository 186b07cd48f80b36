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
local floor = math.floor

local _M = {}

local CHUNK_MAX = 256          -- units a worker holds of one window counter at most
local TOKEN_CHUNK_MAX = 64     -- tokens a worker reserves for one clock reading at most

local workers = 1
--- Number of workers sharing the dict (chunk sizes leave room for each to hold one).
function _M.set_workers(n)
    workers = n > 0 and n or 1
end

local L, L_n = {}, 0           -- per worker: counter key -> its local state
--- Replace this worker's local state (tests simulate several workers with it).
function _M.set_state(t)
    local old = L
    L, L_n = t, 0
    return old
end

-- A new local state entry (the table is dropped when per-user/IP keys pile up: what it held
-- is then never spent, which only lowers what the node admits).
local function new_state(key, st)
    if L_n >= 20000 then
        L, L_n = {}, 0
    end
    L[key] = st
    L_n = L_n + 1
    return st
end

-- Units a worker may hold of rule r's counters (0: none, every request checks the dict).
local function chunk(r, token)
    local c = r.chunk
    if c == nil then
        if token then
            local rate = r.limit / r.window            -- units per second
            c = floor((r.burst or r.limit) / 1024)
            if c > floor(rate / 1000) then              -- what one millisecond refills
                c = floor(rate / 1000)
            end
            if c > TOKEN_CHUNK_MAX then
                c = TOKEN_CHUNK_MAX
            end
        else
            c = floor(r.limit / 1024)
            if c > CHUNK_MAX then
                c = CHUNK_MAX
            end
        end
        r.chunk = c
    end
    return c
end
_M.chunk = chunk

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
    local st = L[key]
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
    if total <= limit - workers * (take - units) then
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

-- Token bucket: GCRA on integer token time.
--
-- Time is counted in tokens: rule r's grid emits p tokens every q ms (p / q = limit /
-- (1000 x window), reduced), N(t) = floor(ms(t) x p / q) tokens from the Unix epoch to the
-- millisecond of t (ngx.now(), the resolution the bucket runs on). The state is the
-- theoretical arrival time as a token index, tat: the bucket holds burst - (tat - N(now))
-- tokens, none left to spend when tat - N(now) >= burst; a request of u units conforms when
-- max(tat, N(now)) + u - N(now) <= burst (+ what the throttle delay refills) and then sets
-- tat to max(tat, N(now)) + u. Integers only, so no rate the validator accepts (limit <= 1e12,
-- window 1 ... 86400 s) loses a token to rounding: with float seconds one token of 1e9 per
-- 60 s (6e-8 s) was below the spacing of doubles at a Unix time (2.4e-7 s) and never counted.
-- Indices are kept modulo M = 2^48: what matters is tat - N(now), which stays within
-- +-(burst + chunk + 5 s of refill) < 2^44, so the difference mod M, taken in (-M/2, M/2], is
-- exact; N(now) mod M is computed exactly with products split below 2^53 (mulmod).
local M = 2 ^ 48
local HALF = 2 ^ 47
local S24 = 2 ^ 24
local RETRIES = 8

-- a x b mod M for integers 0 <= a, b < 2^53 (every partial sum below 2^50: exact)
local function mulmod(a, b)
    a, b = a % M, b % M
    local ah, bh = floor(a / S24), floor(b / S24)
    local al, bl = a - ah * S24, b - bh * S24
    return (((ah * bl + al * bh) % S24) * S24 + al * bl) % M
end
_M.mulmod = mulmod

local function gcd(a, b)
    while b > 0 do
        a, b = b, a % b
    end
    return a
end

-- The refill grid of rule r (p tokens every q ms), compiled once per rule table.
local function grid(r)
    local w = 1000 * r.window
    local g = gcd(r.limit, w)
    local p, q = r.limit / g, w / g
    local pd = floor(p / q)
    r.tb_p, r.tb_q, r.tb_pd, r.tb_pr = p, q, pd, p - pd * q
    r.tb_ms, r.tb_n = false, 0
    r.tb_t = r.window / r.limit                           -- seconds per token (delays only)
    -- the state entry outlives any state it can hold (see token()): time to refill the
    -- burst, a chunk and the longest throttle delay, plus 2 s for clocks of other workers
    r.tb_ttl = (r.burst + chunk(r, true)) * r.tb_t + 7
end

--- N(now) mod M: tokens the grid of rule r emitted up to the millisecond of `now`
-- (x = a q + b, N = a p + b floor(p/q) + floor(b (p mod q) / q), where b (p mod q) < q^2
-- <= (8.64e7)^2 < 2^53 is exact and so is its floor-division).
function _M.emitted(r, now)
    if not r.tb_q then
        grid(r)
    end
    local x = floor(now * 1000 + 0.5)
    if x == r.tb_ms then
        return r.tb_n
    end
    local q = r.tb_q
    local a = floor(x / q)
    local b = x - a * q
    local n = (mulmod(a, r.tb_p) + mulmod(b, r.tb_pd) + floor(b * r.tb_pr / q)) % M
    r.tb_ms, r.tb_n = x, n
    return n
end
local emitted = _M.emitted

-- Token bucket local state: {clock reading of the chunk, tokens held, expiry this worker set,
-- the entry's value after this worker's last update (false: none)}.
local function tstate(key)
    local st = L[key]
    if not st then
        st = new_state(key, { false, 0, 0, false })
    end
    return st
end

-- Lock-free update (no lock, never yields). The dict holds tat mod M; every change is one
-- `incr`, the creation of an absent (= full) bucket one `add`. A worker takes the state
-- (base: the value it left there itself last time, else a `get`), computes its target from
-- it and adds target - value with incr; incr returns the
-- value after the addition, so the worker learns the exact value its addition landed on
-- (w - what it added). If that is the base it computed from, nothing changed in between and
-- the read-modify-write was atomic (an incr +x and -x of another worker in between leave the
-- same state, for which the same target is right). Otherwise it recomputes from the value it
-- landed on and adds the difference between its new target and what it already added — a
-- correction that is 0 in the common case (another request's plain `+u` commutes with its
-- own `+u`; only a refill clamp, max(tat, N), or a refusal makes it non-zero) — until one
-- addition lands on the base it computed from (at most RETRIES rounds; then it takes back all
-- it added and refuses, so a storm of conflicts never over-admits).
-- Exactness: each admission is decided on a state it landed on unchanged, i.e. as in a
-- sequential GCRA. The one window where other workers see an intermediate value is between a
-- worker's conflicting incr and its correction — two shared-dict operations with only Lua
-- arithmetic between them, no yield. Seen there, a too-high value only refuses (transiently)
-- and a too-low one does not arise from admissions (their additions are >= 0); should a
-- worker be descheduled exactly there while another decides on the intermediate value, the
-- error is bounded by the one correction (units + chunk of that request).
-- The entry's TTL (tb_ttl) exceeds the time to refill anything it can hold, and every worker
-- that sets it sets now + tb_ttl; a worker refreshes it (expire) when what it set itself
-- might no longer cover its own state (about once per tb_ttl - tau per worker and key), so
-- an entry never expires before its bucket is full (absent = full). When it outlives that,
-- the clamp max(tat, N) makes the stale tat harmless.
function _M.token(dict, key, r, units, now, max_delay)
    local burst = r.burst
    if units > burst then
        return false, 0, r.window, 0
    end
    local st = tstate(key)
    if st[1] == now and st[2] >= units then
        st[2] = st[2] - units
        return true, 0, 0, 0
    end
    local n = emitted(r, now)
    local ch = max_delay > 0 and 0 or chunk(r, true)
    local back = st[2]                      -- the unspent rest of an older chunk goes back
    st[1], st[2] = false, 0
    local T = r.tb_t
    -- the value this worker left in the entry is the first guess (right whenever no other
    -- worker changed it since: one incr and no get); a wrong guess is caught like a conflict
    local base, guess = st[4], true
    if base == false then
        base, guess = dict:get(key), false
    end
    local mine = 0                          -- what this request has added to the entry so far
    for _ = 1, RETRIES do
        local d = 0                         -- tat - N(now), in tokens
        if base then
            d = (base - n) % M
            if d >= HALF then
                d = d - M
            end
        end
        local t0 = d - back
        if t0 < 0 then
            t0 = 0                          -- full (or fuller than full): refill is capped
        end
        local need = t0 + units
        local excess = need - burst
        local ok = excess <= 0 or excess <= max_delay / T * (1 + 1e-12)   -- what the delay refills
        local rel, took = t0, 0             -- refused: only the give-back changes the state
        if ok then
            rel = need
            if ch > 0 and need + ch * (workers + 1) <= burst then
                rel, took = need + ch, ch   -- far from empty: reserve a chunk too
            end
        end
        local target = (n + rel) % M
        local done = false
        if base == nil then
            -- absent means full: create it (only one worker's add can succeed)
            if dict:add(key, target, r.tb_ttl) then
                st[3] = now + r.tb_ttl
                done = true
            else
                base = dict:get(key)
            end
        else
            local delta = target - (base + mine)
            if delta == 0 and not guess then
                done = true                 -- the entry already holds the target
            else
                -- (an incr of 0 checks a guess that needs no change)
                local w = dict:incr(key, delta)
                guess = false
                if w == nil then
                    base, mine = nil, 0     -- expired (or never there): full, start over
                else
                    mine = mine + delta
                    local landed = w - mine
                    done = landed == base
                    base = landed
                end
            end
            if done and rel > 0 and now + rel * T + 1 > st[3] then
                dict:expire(key, r.tb_ttl)
                st[3] = now + r.tb_ttl
            end
        end
        if done then
            st[4] = (base or target) + mine
            if not ok then
                return false, 0, excess * T, 0
            end
            if took > 0 then
                st[1], st[2] = now, took
            end
            local rem = burst - rel
            return true, excess > 0 and excess * T or 0, 0, rem > 0 and rem or 0
        end
    end
    if mine ~= 0 then
        dict:incr(key, -mine)               -- give up: take back what this request added
    end
    st[4] = false
    return false, 0, T, 0
end

return _M
