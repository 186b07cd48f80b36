-- The token bucket of the node rules (GCRA in integer token time, lock-free): the third
-- algorithm of tollgate.rules.local, which re-exports token(), emitted() and mulmod().
local chunks = require("tollgate.rules.chunks")

local floor = math.floor
local chunk = chunks.chunk
local new_state = chunks.new_state

local _M = {}

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
    local st = chunks.get(key)
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
            if ch > 0 and need + ch * (chunks.workers() + 1) <= burst then
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
