-- The body filter (body_filter_by_lua): a download is charged as its bytes leave and paced when
-- its app cannot pay (docs/design.md "Pacing").
--
-- * Charged as it flows: the access phase pays the base cost and a bounded estimate; here the
--   transfer pays its bandwidth in chunks of about 100 ms of the app's guaranteed rate, one
--   chunk ahead of the bytes sent ($body_bytes_sent), from the node's lease (or, for a request
--   admitted in fail-open, from the fail-open budget). The log phase settles the remainder.
-- * Paced, not cut: when the lease cannot pay a chunk, the transfer follows its share: the app's
--   guaranteed rate on this node (guaranteed / active nodes of the app's lease, times the
--   emergency ratio of its priority; the fail-open rate while the request runs on fail-open)
--   divided among the app's downloads on the node that pay as they flow, counted from their
--   first bytes (a shared-dict counter; paced or not yet: the first one paced does not take the
--   share of those paced a moment later). It keeps paying chunks from what the refill brings;
--   bytes the lease could not pay are charged in the log phase as local debt, which the next
--   grants repay first. A paced transfer stays paced to its end (its burst was spent).
-- * How it follows its share: the transfer keeps an allowance, the bytes it may have sent by
--   now (its bytes when pacing began plus its share since, at most BANK seconds of share ahead
--   of what it sent), and each time the filter runs it sets nginx's per-request rate
--   ($limit_rate) so that the transfer closes its gap to the allowance in about TAU seconds
--   (rate = share + gap / TAU, within LOW and HIGH times the share; then the highest rate with
--   the same pause). nginx pauses floor(bytes * 1000 / rate) ms after each write, and a write
--   is what the proxy's buffers hold (8 KiB by default; the filter takes the largest it has seen
--   for the transfer): a rate of the share alone lost 5-20 % to the rounding and to the event
--   loop's latency (four parallel streams got 81 % of the guarantee). The allowance is an
--   integral: what the pauses lose, the rate makes up.
-- * nginx's second limit: the bytes after limit_rate_after <= rate * (whole seconds since the
--   request's start second + 1). The location include sets limit_rate_after to $tg_ra, which
--   the filter sets to $bytes_sent when pacing begins (nginx reads it at the first write with a
--   rate): the burst is neither paused nor counted by the limit. Where the limit would still
--   stop the transfer short of the allowance it ends the current second with (its share fell
--   below its average since the request began: more transfers or nodes, an emergency; or the
--   rate is below what the pauses really give), the rate is raised to put the limit there: a
--   transfer the limit stops runs the filter again only when the next second moves the limit,
--   so the limit must already hold that second's allowance. A share too fast for the pauses
--   (more than write * 1000 bytes/s: a pause of 0 ms) is paced by that limit alone, each
--   second's allowance at the second's start (limit_rate_after is then set below the bytes
--   sent, for the second pacing began in). $limit_rate 0 means "no limit" to nginx: a share
--   of 0 (P3 in an emergency) is a transfer held at its allowance by the limit, one write a
--   second beyond it (the filter runs and sees the emergency end).
-- Cost: a response of a worker with no download in flight pays one comparison; other responses
-- one lookup of the request's state and, the first time, a read of their Content-Length; a
-- download that pays as it flows a read of the bytes sent per call, a paced one the node's
-- counters every SHARE_TTL and a variable write when its rate moves by a STEP.
local ffi = require("ffi")
local base = require("resty.core.base")
local shm = require("tollgate.shm")
local reqstate = require("tollgate.request.state")
local l3 = require("tollgate.lease.bucket")
local emergency = require("tollgate.lease.emergency")
local metrics = require("tollgate.metrics")
local numvar = require("tollgate.request.numvar")

local dict = shm.dict
local K = shm.keys
local var = ngx.var
local now = ngx.now
local time = ngx.time
local start_time = ngx.req.start_time
local setvar = numvar.set
local get_request = base.get_request
local cast = ffi.cast
local log = ngx.log
local ERR = ngx.ERR
local floor = math.floor
local ceil = math.ceil
local tonumber = tonumber

local _M = {}

local ON = true         -- TOLLGATE_PACING
local QUANTUM = 65536   -- bytes of a bandwidth unit (the calculator's quantum)
local AHEAD = 0.1       -- seconds of the app's rate a chunk pays ahead
local TAU = 0.1         -- seconds in which the rate closes a transfer's gap to its allowance
local BANK = 1          -- seconds of share a transfer that fell behind may make up
local LOW, HIGH = 0.5, 4 -- the rate stays within these multiples of the share
local TRICKLE = 16384   -- bytes nginx's second limit lets through beyond the allowance
-- bytes nginx writes at a time, until a transfer has shown its own: proxy_busy_buffers_size
-- with proxy buffering (8 KiB by default), proxy_buffer_size without (4 KiB)
local WRITE = 8192
local WRITE_MAX = 32768 -- bytes, at most, taken for one write
local SHARE_TTL = 0.05  -- seconds a transfer keeps its share before reading the counters again
local STEP = 1 / 16     -- the rate changes in steps of at least this part of it
local conf

-- The bytes a response has sent (c->sent, what $bytes_sent prints): read from nginx's
-- connection, whose first fields (data, read, write, fd, recv, send, recv_chain, send_chain,
-- listening, sent) and the request's (signature, connection) have been the same since nginx
-- 0.7. Reading $bytes_sent would print the number into the request's pool at every call (20
-- bytes each, freed only when the request ends: megabytes over a long download). The first
-- reads of each worker are checked against $bytes_sent; a mismatch falls back to it.
ffi.cdef[[
typedef struct {
    void *data; void *read; void *write; int fd;
    void *recv; void *send; void *recv_chain; void *send_chain; void *listening;
    int64_t sent;
} tollgate_conn_head_t;
typedef struct { uint32_t signature; tollgate_conn_head_t *connection; } tollgate_req_head_t;
]]
local req_head = ffi.typeof("tollgate_req_head_t *")
local SENT = nil        -- nil: not checked yet; true: the struct read; false: $bytes_sent

local function bytes_sent()
    if SENT then
        return tonumber(cast(req_head, get_request()).connection.sent)
    end
    local v = tonumber(var.bytes_sent) or 0
    if SENT == nil and v > 0 then
        SENT = tonumber(cast(req_head, get_request()).connection.sent) == v
        if not SENT then
            log(ERR, "tollgate: nginx's connection struct is not the expected one, pacing reads ",
                "$bytes_sent (request pool memory per call)")
        end
    end
    return v
end

local live = 0          -- downloads of this worker the filter follows (access() to log())
-- per app id: its shared-dict counters of the downloads on the node that pay as they flow
-- (the share is divided among them) and of those paced
local PACE_KEY, PACED_KEY = {}, {}

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

-- Tokens per second of the app on this node.
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

-- Bytes per second of one paced transfer of `a` on this node (read again every SHARE_TTL).
local function share(ctx, a, t)
    if t < ctx.tg_pst then
        return ctx.tg_ps
    end
    local n = dict:get(ctx.tg_pk) or 1
    if n < 1 then
        n = 1
    end
    local s = node_rate(a, K(a.id), ctx.tg_source) / a.c_bw * QUANTUM / n
    ctx.tg_ps, ctx.tg_pst = s, t + SHARE_TTL
    return s
end

--- nginx's rate (bytes/s) for a paced transfer whose share is `s` bytes/s, that is `gap` bytes
-- behind its allowance (ahead when negative), has sent `after` bytes beyond limit_rate_after
-- in the `nsec`-th second of the request (whole seconds since its start second, plus one),
-- `rest` seconds before that second ends, and writes about `x` bytes at a time; and true when
-- nginx's second limit paces it.
function _M.rate(s, gap, after, nsec, rest, x)
    -- the rate that puts nginx's second limit (after <= rate * nsec) at the allowance this
    -- second ends with (plus TRICKLE): the limit moves only when the filter runs, which is when
    -- bytes move, so a transfer it stops waits for the next second
    local open = (after + gap + s * rest + TRICKLE) / nsec
    local fast = x * 1000 + 1
    if s >= fast then
        -- too fast for nginx's pauses (x bytes pause floor(x * 1000 / rate) ms: 0 at more than
        -- x * 1000 bytes/s): the second limit paces the transfer, at a rate that keeps the
        -- pauses 0
        return ceil(open > fast and open or fast), true
    end
    local r = s + gap / TAU
    local lo, hi = s * LOW, s * HIGH
    if r < lo then
        r = lo
    elseif r > hi then
        r = hi
    end
    -- the pause this rate gives a write of x bytes, whole milliseconds; the highest rate with
    -- that pause keeps the second limit furthest from the transfer (with the rate itself, a
    -- transfer that the rounding let run faster than its rate came up against the limit)
    local pause = floor(x * 1000 / r)
    if pause >= 1 then
        r = floor(x * 1000 / pause)
    end
    -- the second limit must not stop the transfer short of that allowance
    local bound = r < open
    if bound then
        r = open
    end
    r = ceil(r)
    return r >= 1 and r or 1, bound
end
local rate = _M.rate

--- limit_rate_after (bytes) for a transfer paced when it has sent `sent` bytes, in the `nsec`-th
-- second of the request `rest` seconds before its end, with a share of `s` bytes/s and writes of
-- `x` bytes: the bytes sent, so that nginx neither pauses nor counts the burst before; for a
-- share too fast for the pauses, less, so that nginx's second limit at the least rate without
-- pauses (x * 1000 + 1 bytes/s) stops the transfer at its allowance for this second (from the
-- next second on, the rate that puts the limit at the allowance is above that least rate).
function _M.after(sent, s, nsec, rest, x)
    local fast = x * 1000 + 1
    if s < fast then
        return sent
    end
    local d = fast * nsec - s * rest - TRICKLE
    if d <= 0 then
        return sent
    end
    return d < sent and ceil(sent - d) or 0
end
local after_of = _M.after

--- The allowance (bytes) of a paced transfer with share `s` bytes/s `dt` seconds after it was
-- `allowed`, when it has sent `sent`: never more than BANK seconds of share ahead of the bytes.
function _M.allow(allowed, s, dt, sent)
    allowed = allowed + s * dt
    local most = sent + s * BANK
    return allowed > most and most or allowed
end
local allow = _M.allow

-- Steer a paced transfer that has sent `sent` bytes ($bytes_sent) by `t`.
local function steer(ctx, a, t, sent)
    -- the allowance grows at the share the transfer had since the filter last ran (one held by
    -- nginx's second limit runs it again only in the next second)
    local allowed = allow(ctx.tg_pallow, ctx.tg_ps, t - ctx.tg_pt, sent)
    local s = share(ctx, a, t)
    ctx.tg_pallow, ctx.tg_pt = allowed, t
    local sec = time()
    local x = ctx.tg_px
    local r, bound = rate(s, allowed - sent, sent - ctx.tg_pl, sec - floor(start_time()) + 1,
        sec + 1 - t, x > 0 and x or WRITE)
    -- a new rate only when it moved by a STEP (nginx keeps each value set in the request's pool
    -- until the request ends; the allowance makes up what the steps leave), or exactly where
    -- nginx's second limit paces the transfer
    ctx.tg_pb = bound
    local d = r - ctx.tg_pr
    if d * d > ctx.tg_pr * ctx.tg_pr * (STEP * STEP) or (bound and d ~= 0) then
        ctx.tg_pr = r
        setvar("limit_rate", r)
    end
end

-- Start pacing a transfer that has sent `sent` bytes ($bytes_sent).
local function pace(ctx, a, t, sent)
    ctx.tg_paced = PACED_KEY[a.id]   -- one more paced transfer of the app on the node
    dict:incr(ctx.tg_paced, 1, 0)
    ctx.tg_p0, ctx.tg_pt, ctx.tg_pallow = t, t, sent
    ctx.tg_pst, ctx.tg_pr, ctx.tg_px, ctx.tg_psent = 0, 0, 0, sent
    local s = share(ctx, a, t)
    -- nginx's rate applies to the bytes after these (limit_rate_after $tg_ra)
    local sec = time()
    local l = after_of(sent, s, sec - floor(start_time()) + 1, sec + 1 - t, WRITE)
    ctx.tg_pl = l
    setvar("tg_ra", l)
    steer(ctx, a, t, sent)
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
        -- one more transfer of the app on the node that the node's share is divided among
        -- (counted from its first bytes, before any is paced: the first one paced must not take
        -- the share of the others, paced a moment later)
        local id = a.id
        local k = PACE_KEY[id]
        if not k then
            k = "pace:" .. id
            PACE_KEY[id], PACED_KEY[id] = k, "paced:" .. id
        end
        ctx.tg_pk = k
        dict:incr(k, 1, 0)
        if (dict:get(PACED_KEY[id]) or 0) > 0 then
            -- the app's transfers on this node are paced already: its tokens are spent, and
            -- what the refill brings is their share, not a new transfer's burst
            pace(ctx, a, now(), bytes_sent())
            return
        end
    end
    -- the bytes sent, headers included: the chunks it must have paid are counted from them (a
    -- unit ahead at most for the header; the log phase settles against the body's bytes)
    local sent = bytes_sent()
    -- the body's bytes out count as they leave, a unit at least at a time (the log phase counts
    -- the rest): a long transfer's bandwidth shows while it runs. The header's bytes
    -- ($bytes_sent - $body_bytes_sent) are read once, when body bytes have left.
    local hdr = ctx.tg_phdr
    if not hdr and sent >= QUANTUM then
        local b = tonumber(var.body_bytes_sent) or 0
        if b > 0 then
            hdr = sent - b
            ctx.tg_phdr = hdr
        end
    end
    if hdr then
        local body, counted = sent - hdr, ctx.tg_bcount or 0
        if body - counted >= QUANTUM then
            -- the series tollgate.request.log counts the rest in
            metrics.flow(metrics.bytes_series(a, "out"), a.id, body - counted)
            ctx.tg_bcount = body
        end
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
            pace(ctx, a, t, sent)
            return
        end
    end
    if ctx.tg_paced then
        -- nginx's writes: the bytes sent since the filter last ran (it runs once per write of
        -- new bytes; a write nginx's limit cut short is less), the most seen
        local w = sent - ctx.tg_psent
        ctx.tg_psent = sent
        if w > ctx.tg_px and w <= WRITE_MAX then
            ctx.tg_px = w
        end
        t = t or now()
        -- a rate that puts nginx's second limit at the allowance does not change within a
        -- millisecond of nginx's clock (a transfer paced by that limit writes without pauses)
        if t ~= ctx.tg_pt or not ctx.tg_pb then
            steer(ctx, a, t, sent)
        end
    end
end

--- Log phase: stop following the request; returns the tokens its transfer paid while it moved.
function _M.close(ctx)
    unfollow(ctx)
    if ctx.tg_pk then
        dict:incr(ctx.tg_pk, -1, 0)
    end
    if ctx.tg_paced then
        dict:incr(ctx.tg_paced, -1, 0)
    end
    local paced = ctx.tg_paced and now() - ctx.tg_p0 or 0
    if paced > 0 then
        local a = ctx.tg_app
        metrics.inc('ratelimit_paced_seconds_total{app_id="' .. a.id .. '"}', paced)
    end
    return ctx.tg_flow or 0
end

return _M
