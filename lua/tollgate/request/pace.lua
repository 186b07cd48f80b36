-- The body filter (body_filter_by_lua): a download is charged as its bytes leave and paced when
-- its app cannot pay (docs/design.md "Pacing").
--
-- * Charged as it flows: the access phase pays the base cost and a bounded estimate; here the
--   transfer pays its bandwidth in chunks of about 100 ms of the app's guaranteed rate, one
--   chunk ahead of the bytes sent ($body_bytes_sent), from the node's lease (or, for a request
--   admitted in fail-open, from the fail-open budget). The log phase settles the remainder.
-- * Paced, not cut: when the lease cannot pay a chunk, nginx's per-request rate ($limit_rate)
--   slows the transfer to its share: the app's guaranteed rate on this node (guaranteed / active
--   nodes of the app's lease, times the emergency ratio of its priority; the fail-open rate while
--   the request runs on fail-open) divided among the app's paced transfers on the node (a
--   shared-dict counter). It keeps paying chunks from what the refill brings; bytes the lease
--   could not pay are charged in the log phase as local debt, which the next grants repay first.
--   A paced transfer stays paced to its end (its burst was spent).
-- * nginx's rate is cumulative from the request's start (limit = rate * (now_sec - start_sec + 1)
--   - bytes_sent): the filter keeps its own allowance (bytes sent when pacing began, plus the
--   share since) and sets $limit_rate = allowance / elapsed seconds at every call, so that a
--   transfer paced after a paid burst neither stalls for the burst nor bursts on. $limit_rate 0
--   means "no limit" to nginx: a share of 0 (P3 in an emergency) is 1 byte/s, a stalled transfer.
-- Cost: a response of a worker with no download in flight pays one comparison; other responses
-- one lookup of the request's state.
local shm = require("tollgate.shm")
local reqstate = require("tollgate.request.state")
local l3 = require("tollgate.lease.bucket")
local emergency = require("tollgate.lease.emergency")
local metrics = require("tollgate.metrics")

local dict = shm.dict
local K = shm.keys
local var = ngx.var
local now = ngx.now
local time = ngx.time
local start_time = ngx.req.start_time
local floor = math.floor
local ceil = math.ceil
local tonumber = tonumber

local _M = {}

local ON = true         -- TOLLGATE_PACING
local QUANTUM = 65536   -- bytes of a bandwidth unit (the calculator's quantum)
local AHEAD = 0.1       -- seconds of the app's rate a chunk pays ahead
local BANK = 1          -- seconds of unused share a paced transfer may keep for later
local conf

local live = 0          -- downloads of this worker the filter follows (access() to log())

--- Settings and the cost calculator of this nginx (tollgate.handler's init).
function _M.configure(settings, calc)
    conf = settings
    ON = settings.pacing ~= "off"
    QUANTUM = calc.quantum
end

function _M.enabled()
    return ON
end

--- Access phase: follow this admitted download of app `a` whose access paid `prepaid` tokens of
-- its bandwidth up front.
function _M.follow(ctx, prepaid)
    ctx.tg_pace = true
    ctx.tg_paid = prepaid > 0 and prepaid or 0
    live = live + 1
end

-- Stop following a request (its bandwidth is paid, or it ended).
local function unfollow(ctx)
    ctx.tg_pace = false
    live = live - 1
end

-- Tokens per second of the app on this node, and the chunk its transfers pay at a time.
local function node_rate(a, k, source)
    local rate
    if source == "fail_open" then
        rate = conf.fail_open_rate
    else
        local nodes = dict:get(k.nodes) or 1
        rate = a.guaranteed / (nodes > 1 and nodes or 1)
        if dict:get(a.k_em) then
            rate = rate * emergency.ratio(a.priority)
        end
    end
    return rate
end

-- The chunk (tokens) a transfer of `a` pays at a time: ~100 ms of its rate, at most an eighth
-- of its burst (a lease holds at most half of it), at least one unit.
local function chunk_of(a, source)
    local rate = source == "fail_open" and conf.fail_open_rate or a.guaranteed
    local c = ceil(rate * AHEAD)
    local most = floor(a.burst / 8)
    if c > most then
        c = most
    end
    local unit = a.c_bw
    if c < unit then
        c = unit
    end
    return c
end

-- Bytes per second of one transfer of `a` on this node.
local function share(ctx, a)
    local k = K(a.id)
    local n = dict:get(ctx.tg_pk) or 1
    if n < 1 then
        n = 1
    end
    return node_rate(a, k, ctx.tg_source) / a.c_bw * QUANTUM / n
end

-- nginx's rate for a share of `s` bytes/s and an allowance of `allowed` bytes sent in total by
-- now. nginx paces with the rate twice: a pause of bytes/rate after each write, and the bound
-- rate * (whole seconds since the request's start second + 1) on the bytes sent. The share keeps
-- the pauses right; the allowance divided by the seconds moves the bound, so that bytes paid
-- before pacing began (a burst) do not stall the transfer. A bound that the share alone already
-- gives (a transfer paced from its start) is nginx's own: at most one second of share ahead.
local function set_rate(s, allowed)
    local n = time() - floor(start_time()) + 1
    local rate = ceil(allowed / n)
    if rate < s then
        rate = ceil(s)
    end
    var.limit_rate = rate >= 1 and rate or 1
end

local function pace(ctx, a, t)
    local s = share(ctx, a)
    local allowed
    if ctx.tg_paced then
        allowed = ctx.tg_pallow + s * (t - ctx.tg_pt)
    else
        if not ctx.tg_pk then   -- one more paced transfer of the app on the node
            ctx.tg_pk = "pace:" .. a.id
            dict:incr(ctx.tg_pk, 1, 0)
            s = share(ctx, a)
        end
        ctx.tg_paced = true
        ctx.tg_p0 = t
        allowed = (tonumber(var.bytes_sent) or 0) + s * AHEAD
    end
    local cap = (tonumber(var.bytes_sent) or 0) + s * BANK
    if allowed > cap then
        allowed = cap
    end
    ctx.tg_pallow, ctx.tg_pt = allowed, t
    set_rate(s, allowed)
end

--- body_filter_by_lua.
function _M.run()
    if live == 0 then
        return
    end
    local ctx = reqstate.current()
    if not ctx or not ctx.tg_pace then
        return
    end
    local a = ctx.tg_app
    local unit = a.c_bw
    local total = ctx.tg_ptotal
    if not total then
        -- its first bytes: the price of the whole body when its length is known (-1 when not);
        -- a body the access phase paid in full (a small object) needs nothing more
        local len = tonumber(var.sent_http_content_length)
        total = len and ceil(len / QUANTUM) * unit or -1
        if unit <= 0 or (total >= 0 and total <= ctx.tg_paid) then
            unfollow(ctx)
            return
        end
        ctx.tg_ptotal = total
        if (dict:get("pace:" .. a.id) or 0) > 0 then
            -- the app's transfers on this node are paced already: its tokens are spent, and
            -- what the refill brings is their share, not a new transfer's burst
            pace(ctx, a, now())
            return
        end
    end
    local sent = tonumber(var.body_bytes_sent) or 0
    if sent - (ctx.tg_bcount or 0) >= QUANTUM then
        -- the bytes out count as they leave, a unit at least at a time (the log phase counts
        -- the rest): a long transfer's bandwidth shows while it runs
        local series = a.tg_m_out   -- the series tollgate.request.log counts them in
        if not series then
            series = 'ratelimit_bytes_total{app_id="' .. a.id .. '",direction="out"}'
            a.tg_m_out = series
        end
        metrics.flow(series, a.id, sent - (ctx.tg_bcount or 0))
        ctx.tg_bcount = sent
    end
    local need = ceil(sent / QUANTUM) * unit
    local chunk = chunk_of(a, ctx.tg_source)
    if total >= 0 and ctx.tg_paid + chunk > total then
        chunk = total - ctx.tg_paid     -- never ahead of the body's end
    end
    local t
    if chunk > 0 and need + chunk > ctx.tg_paid then
        local ok = l3.pay(a, chunk, ctx.tg_source)
        t = now()
        if ok then
            -- a paced transfer stays paced: the refill that pays its chunks is its share (a
            -- transfer let go at full speed on the refill's reserve would run at the share
            -- plus what the other transfers' share pays)
            ctx.tg_paid = ctx.tg_paid + chunk
            ctx.tg_flow = (ctx.tg_flow or 0) + chunk
        elseif not ctx.tg_paced then
            pace(ctx, a, t)
            return
        end
    end
    if ctx.tg_paced then
        pace(ctx, a, t or now())
    end
end

--- Log phase: stop following the request; returns the tokens its transfer paid while it moved.
function _M.close(ctx)
    unfollow(ctx)
    if ctx.tg_pk then
        dict:incr(ctx.tg_pk, -1, 0)
    end
    local paced = ctx.tg_paced and now() - ctx.tg_p0 or 0
    if paced > 0 then
        local a = ctx.tg_app
        metrics.inc('ratelimit_paced_seconds_total{app_id="' .. a.id .. '"}', paced)
    end
    return ctx.tg_flow or 0
end

return _M
