-- Prelude prepended by both loaders (lua/tollgate/redis/scripts.lua and internal/scripts)
-- to every script of this directory. Time comes from Redis TIME, never from a node clock; the
-- simulator may pass an explicit time (Unix microseconds) as the optional last argument.

-- Emergency quota ratio by priority (Req 6.4, Property 6): P0 100 %, P1 50 %, P2 10 %, P3+ 0 %.
local TG_RATIO = { [0] = 1, [1] = 0.5, [2] = 0.1 }
local TG_OVERLOAD_FROM = 0.9 -- usage above which P1-P3 refill falls towards the ratio

-- Now in Unix microseconds: the explicit time `arg` when given, else Redis TIME.
local function tg_now_us(arg)
    if arg ~= nil and arg ~= '' then
        local n = tonumber(arg)
        if not n or n ~= n or n <= 0 or n >= 9007199254740992 then
            error({ err = 'invalid_now' })
        end
        return math.floor(n)
    end
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The app id of an app's key (the part after the last ':', as internal/keys builds them).
local function tg_app_of(key)
    return key:match(':([^:]+)$')
end

local function tg_ratio(prio)
    return TG_RATIO[prio] or 0
end

-- Overload refill factor of a priority at `usage` (consumption / capacity): 1 up to 90 %, then
-- linearly down to the priority's emergency ratio at 100 %. P0 is never reduced.
local function tg_overload(prio, usage)
    if prio <= 0 or usage <= TG_OVERLOAD_FROM then
        return 1
    end
    local x = (usage - TG_OVERLOAD_FROM) / (1 - TG_OVERLOAD_FROM)
    if x > 1 then
        x = 1
    end
    return 1 - (1 - tg_ratio(prio)) * x
end

-- The L1 state the L2 scripts need. `em` and `ov` say whether emergency and overload are in
-- force at `now_us`: an emergency or overload whose `until` has passed is over, so both end
-- even with the control plane down. `em_on` and `ov_on` are the recorded modes, which held
-- (up to their ends) since `changed_us`, the last change of either.
local function tg_load_l1(key, now_us)
    local v = redis.call('HMGET', key, 'capacity', 'reserved_ratio', 'available', 'borrowed',
                         'emergency_mode', 'emergency_until', 'overload_usage', 'overload_until',
                         'factor_changed_us')
    local st = {
        capacity = tonumber(v[1]),
        ratio = tonumber(v[2]) or 0,
        available = tonumber(v[3]) or 0,
        em_on = v[5] == '1',
        em_until_us = (tonumber(v[6]) or 0) * 1000000,
        ov_usage = tonumber(v[7]) or 0,
        ov_until_us = (tonumber(v[8]) or 0) * 1000000,
        changed_us = tonumber(v[9]) or 0,
    }
    st.ov_on = st.ov_usage > TG_OVERLOAD_FROM
    st.em = st.em_on and st.em_until_us > now_us
    st.ov = st.ov_on and st.ov_until_us > now_us
    return st
end

-- Load an L2 bucket. Returns nil when the app has no config.
local function tg_load_l2(key)
    local v = redis.call('HMGET', key, 'guaranteed_quota', 'burst_quota', 'current_tokens',
                         'last_refill_us', 'refill_factor', 'factor_until_us', 'factor_after',
                         'priority', 'max_borrow', 'borrowed', 'debt', 'returned_pending',
                         'enabled', 'outstanding')
    if not v[1] then
        return nil
    end
    local b = {
        rate = tonumber(v[1]),
        burst = tonumber(v[2]),
        factor = tonumber(v[5]) or 1,
        until_us = tonumber(v[6]) or 0,
        after = tonumber(v[7]) or 1,
        prio = tonumber(v[8]) or 0,
        max_borrow = tonumber(v[9]) or 0,
        borrowed = tonumber(v[10]) or 0,
        debt = tonumber(v[11]) or 0,
        pending = tonumber(v[12]) or 0,
        enabled = v[13] ~= '0',
        outstanding = tonumber(v[14]) or 0,
        paid = 0,
        principal_paid = 0,
    }
    b.tokens = tonumber(v[3]) or b.burst
    b.last = tonumber(v[4])
    return b
end

-- The refill factor schedule that follows from the recorded L1 modes: the factor holds until
-- `until_us` (0: no end), then `after`. In emergency it is the priority's ratio (Property 6);
-- otherwise the overload factor. (An overload outliving an emergency is taken to last.)
local function tg_schedule(b, st)
    local ov = st.ov_on and tg_overload(b.prio, st.ov_usage) or 1
    if st.em_on then
        b.factor, b.until_us = tg_ratio(b.prio), st.em_until_us
        b.after = (st.ov_on and st.ov_until_us > st.em_until_us) and ov or 1
    elseif st.ov_on then
        b.factor, b.until_us, b.after = ov, st.ov_until_us, 1
    else
        b.factor, b.until_us, b.after = 1, 0, 1
    end
end

-- Integral of a schedule's factor over [from, to] (microseconds).
local function tg_integral(factor, until_us, after, from, to)
    if to <= from then
        return 0
    end
    if until_us <= 0 or until_us >= to then
        return (to - from) * factor
    end
    if until_us <= from then
        return (to - from) * after
    end
    return (until_us - from) * factor + (to - until_us) * after
end

-- Repay debt with `amount` whole tokens (Property 13): debt first; the principal part
-- (paid x borrowed / debt) returns to L1 `available`; paying the whole debt clears `borrowed`.
local function tg_repay(b, amount, l1key)
    local pay = amount
    if pay > b.debt then
        pay = b.debt
    end
    if pay <= 0 then
        return 0
    end
    local principal
    if pay >= b.debt then
        principal = b.borrowed
    else
        principal = math.floor(pay * b.borrowed / b.debt)
        local least = b.borrowed - (b.debt - pay) -- keep borrowed <= debt
        if principal < least then
            principal = least
        end
    end
    b.debt = b.debt - pay
    b.borrowed = b.borrowed - principal
    b.paid = b.paid + pay
    b.principal_paid = b.principal_paid + principal
    if principal > 0 then
        redis.call('HINCRBY', l1key, 'available', principal)
        redis.call('HINCRBY', l1key, 'borrowed', -principal)
        redis.call('HINCRBY', l1key, 'borrow_rev', 1)
    end
    return pay
end

-- Refill in place up to `to_us`: `factor_us` tokens-per-rate microseconds (the integral of the
-- factor), plus returned tokens, capped at `cap` (the burst, or its emergency share); what
-- would overflow pays debt first.
local function tg_refill(b, to_us, factor_us, cap, l1key)
    local t = b.tokens + b.pending + factor_us * b.rate / 1000000
    b.pending = 0
    if t > cap then
        if b.debt > 0 then
            tg_repay(b, math.floor(t - cap), l1key)
        end
        t = cap
    end
    if t < 0 then
        t = 0
    end
    b.tokens = t
    b.last = to_us
end

local function tg_save_l2(key, b)
    redis.call('HSET', key, 'current_tokens', string.format('%.6f', b.tokens),
               'last_refill_us', string.format('%d', b.last),
               'refill_factor', string.format('%.6f', b.factor),
               'factor_until_us', string.format('%d', b.until_us),
               'factor_after', string.format('%.6f', b.after),
               'returned_pending', 0)
    if b.paid > 0 then
        redis.call('HSET', key, 'debt', string.format('%d', b.debt),
                   'borrowed', string.format('%d', b.borrowed))
        redis.call('HINCRBY', key, 'total_repaid', b.paid)
    end
end

-- Refill an L2 bucket up to `now_us` against its cluster's L1 state: the schedule stored at the
-- last refill holds until the L1 modes last changed, the schedule of the current modes after
-- that. The cap is the burst (its emergency share in emergency) minus the tokens outstanding on
-- the nodes (`outstanding` = sum of the leases' held + unreported), so that L2 and the leases
-- together never hold more than one bucket would. Leaves the current schedule in `b` and
-- returns the L1 state.
local function tg_settle(b, l1key, now_us)
    local st = tg_load_l1(l1key, now_us)
    local last = b.last or now_us
    local to = now_us
    if to < last then
        to = last -- a clock step back accrues nothing, and nothing twice later
    end
    local split = st.changed_us
    if split < last then
        split = last
    elseif split > to then
        split = to
    end
    local f = tg_integral(b.factor, b.until_us, b.after, last, split)
    tg_schedule(b, st)
    f = f + tg_integral(b.factor, b.until_us, b.after, split, to)
    if b.until_us > 0 and b.until_us <= to then
        b.factor, b.until_us = b.after, 0 -- the ended part of the schedule is history
    end
    local cap = b.burst
    if st.em then
        cap = b.burst * tg_ratio(b.prio) -- in emergency a bucket holds its share of the burst
    end
    -- the burst bounds what the app holds in all: L2 plus the leases out on the nodes
    if b.outstanding > 0 then
        cap = cap - b.outstanding
        if cap < 0 then
            cap = 0
        end
    end
    tg_refill(b, to, f, cap, l1key)
    return st
end
