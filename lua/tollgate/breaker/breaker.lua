-- Circuit breakers of storage backends (docs/rules-contract.md §3), evaluated per gateway node.
-- The location names its backend with `set $tollgate_backend <name>;` (else "default"); a
-- per_app breaker keeps one state per (backend, app). State lives in the tollgate_breakers dict,
-- shared by the workers:
--   <K>|e            epoch * 4 + state (0 closed, 1 half-open, 2 open); absent = closed, epoch 0
--   <K>|x|<ep>       transition marker: whoever adds it moves the breaker out of epoch <ep>
--   <K>|w|<ep>|<i>   requests + failures * 2^26 finished in sub-window i of closed epoch <ep>
--   <K>|h|<ep>       probes in flight, <K>|s|<ep> successful probes, of half-open epoch <ep>
--   <K>|at           opened at (ms), <K>|lf last failure (ms), <K>|tq / <K>|tf the window at trip
--   k|<K>            <K> has been used on this node (node report, gauges)
--   kq<w>            list: breakers first used since worker <w> last read it (learn_used)
-- Every transition goes through the marker of the epoch it leaves, so exactly one worker makes
-- it (and logs it, counts it and emits its event). Counters of an epoch die with it.
local cfgcache = require("tollgate.config.cache")
local breaker_config = require("tollgate.breaker.config")
local metrics = require("tollgate.metrics")
local events = require("tollgate.events")

local bdict = ngx.shared.tollgate_breakers

-- k|<K> marks a breaker used on this node; its first use also queues K for every worker's
-- report (learn_used), once.
local function mark_used(K)
    if bdict:add("k|" .. K, true) then
        for w = 0, ngx.worker.count() - 1 do
            bdict:rpush("kq" .. w, K)
        end
    end
end
local cdict = ngx.shared.config_dict
local var = ngx.var
local now = ngx.now
local log = ngx.log
local WARN = ngx.WARN
local floor = math.floor
local ceil = math.ceil
local max = math.max
local match = string.match
local tonumber = tonumber
local format = string.format

local _M = {}

local CLOSED, HALF, OPEN = 0, 1, 2
_M.CLOSED, _M.HALF, _M.OPEN = CLOSED, HALF, OPEN
local STATE_NAMES = { [0] = "closed", [1] = "half_open", [2] = "open" }
local FAILBIT = 67108864        -- 2^26: failures are counted above the requests of a sub-window
local SUBWINDOWS = 10
local MARKER_TTL = 600

local N = 0                     -- breakers of the current generation (0: nothing to do)
local compiled_gen = nil
local by_name = {}              -- name -> compiled breaker
local kcache, kcache_n = {}, 0  -- K -> key names of one breaker state (per worker)

local function compile(c)
    local fail = {}
    for _, s in ipairs(c.failure_statuses) do
        fail[s] = true
    end
    local sub_ms = max(1, floor(c.window_ms / SUBWINDOWS))
    local label = '{backend="' .. c.name .. '"}'
    return {
        name = c.name, per_app = c.per_app, window_ms = c.window_ms, sub_ms = sub_ms,
        min_requests = c.min_requests, failure_threshold = c.failure_threshold,
        failure_ratio = c.failure_ratio, open_timeout_ms = c.open_timeout_ms,
        success_threshold = c.success_threshold, max_probes = c.half_open_max_inflight,
        fail = fail,
        ttl = ceil((c.window_ms + 2 * sub_ms) / 1000) + 1,
        half_ttl = max(60, ceil(c.open_timeout_ms / 1000) * 4),
        s_rejected = "ratelimit_circuit_rejected_total" .. label,
        label = label,
    }
end

--- Recompile this worker's breakers from config_dict (on every new config generation).
function _M.compile(generation)
    compiled_gen = generation
    local n, t = 0, {}
    for name, c in pairs(breaker_config.loaded(cdict)) do
        if c.enabled then
            t[name] = compile(c)
            n = n + 1
        end
    end
    by_name, N = t, n
    kcache, kcache_n = {}, 0
end
-- a generation that changed no breaker keeps the compiled ones
cfgcache.on_generation(function(g, drop)
    if drop and not drop.breaker and compiled_gen ~= nil then
        compiled_gen = g
        return
    end
    _M.compile(g)
end)

local function keys_of(K)
    local kt = kcache[K]
    if not kt then
        if kcache_n >= 50000 then
            kcache, kcache_n = {}, 0
        end
        kt = { K = K, e = K .. "|e", at = K .. "|at", lf = K .. "|lf", tq = K .. "|tq",
               tf = K .. "|tf", x = K .. "|x|", w = K .. "|w|", h = K .. "|h|", s = K .. "|s|",
               wkey = nil, wep = nil, widx = nil, seen = false }
        kcache[K] = kt
        kcache_n = kcache_n + 1
    end
    return kt
end

local function state_of(kt)
    local v = bdict:get(kt.e) or 0
    local st = v % 4
    return st, (v - st) / 4
end

-- The breaker this request goes through (nil when none) and its state key names.
local function lookup(app_id)
    local name = var.tollgate_backend
    if name == nil or name == "" then
        name = "default"
    end
    local b = by_name[name]
    if not b then
        return nil
    end
    return b, keys_of(b.per_app and (name .. "/" .. app_id) or name)
end

local function window(b, kt, ep)
    local idx = floor(now() * 1000 / b.sub_ms)
    local q, f = 0, 0
    for i = idx - SUBWINDOWS + 1, idx do
        local v = bdict:get(kt.w .. ep .. "|" .. i)
        if v then
            local fi = floor(v / FAILBIT)
            f = f + fi
            q = q + v - fi * FAILBIT
        end
    end
    return q, f
end

-- Move breaker kt from (ep, from) to `to`; true if this call made the transition.
local function transition(b, kt, ep, from, to, reason, q, f)
    if not bdict:add(kt.x .. ep, true, MARKER_TTL) then
        return false
    end
    local st, cur = state_of(kt)
    if st ~= from or cur ~= ep then
        return false
    end
    local t = now()
    if to == OPEN then
        bdict:set(kt.at, t * 1000)     -- before the state: whoever sees open sees its time
        if q then
            bdict:set(kt.tq, q)
            bdict:set(kt.tf, f)
        end
    end
    bdict:set(kt.e, (ep + 1) * 4 + to)
    mark_used(kt.K)
    local to_name = STATE_NAMES[to]
    metrics.inc(format('ratelimit_circuit_transitions_total{backend="%s",to="%s"}', b.name,
        to_name))
    log(WARN, "tollgate: circuit ", kt.K, " ", STATE_NAMES[from], " -> ", to_name, ": ", reason)
    if to ~= HALF then
        local app = b.per_app and kt.K:sub(#b.name + 2) or nil
        -- never sampled: one entry per transition, which the state machine already rate-limits
        events.push({
            event_type = to == OPEN and "circuit_opened" or "circuit_closed",
            severity = to == OPEN and "error" or "info", app_id = app, rule_id = b.name,
            rule_type = "breaker", action_taken = to == OPEN and "opened" or "closed",
            limit_value = to == OPEN and b.failure_threshold or b.success_threshold,
            current_usage = f, reason = reason,
        }, 1)
    end
    return true
end

local function refuse(b, ctx, retry)
    ctx.tg_brk_refused = true
    metrics.inc(b.s_rejected)
    return false, b.name, retry
end

--- access phase, after the app is known: may the request go to its backend? Returns true, or
-- false, backend name, Retry-After seconds. ctx remembers the breaker for record().
function _M.check(app_id, ctx)
    if N == 0 then
        return true
    end
    local b, kt = lookup(app_id)
    if not b then
        return true
    end
    local st, ep = state_of(kt)
    if st == OPEN then
        local until_ms = (bdict:get(kt.at) or 0) + b.open_timeout_ms
        local t = now() * 1000
        if t < until_ms then
            return refuse(b, ctx, max(1, ceil((until_ms - t) / 1000)))
        end
        transition(b, kt, ep, OPEN, HALF, "open timeout elapsed, probing")
        st, ep = state_of(kt)
    end
    if st == HALF then
        local hkey = kt.h .. ep
        local n = bdict:incr(hkey, 1, 0, b.half_ttl)
        if not n or n > b.max_probes then
            if n then
                bdict:incr(hkey, -1)
            end
            return refuse(b, ctx, 1)
        end
        ctx.tg_brk_probe = true
    elseif st == OPEN then
        return refuse(b, ctx, 1)    -- another worker is moving it to half-open right now
    end
    ctx.tg_brk, ctx.tg_brk_k, ctx.tg_brk_ep = b, kt, ep
    return true
end

-- The outcome of the upstream exchange: true failure, false success, nil none (no upstream).
local function outcome(b)
    local us = var.upstream_status
    if not us then
        return nil
    end
    local code = tonumber(match(us, "(%d%d%d)%D*$"))
    if not code then
        return nil
    end
    if b.fail[code] then
        return true
    end
    if code == 502 or code == 504 then
        -- generated by nginx (connect error, timeout) when the upstream sent no header
        local ht = var.upstream_header_time
        if ht == nil or match(ht, "%-%s*$") then
            return true
        end
    end
    return false
end

local function record_closed(b, kt, ep, failed)
    local st, cur = state_of(kt)
    if st ~= CLOSED or cur ~= ep then
        return          -- the breaker moved on while this request was in flight
    end
    local t = now() * 1000
    local idx = floor(t / b.sub_ms)
    if kt.widx ~= idx or kt.wep ~= ep then
        kt.wkey, kt.widx, kt.wep = kt.w .. ep .. "|" .. idx, idx, ep
    end
    bdict:incr(kt.wkey, failed and FAILBIT + 1 or 1, 0, b.ttl)
    if not kt.seen then
        kt.seen = true
        mark_used(kt.K)
    end
    if failed then
        bdict:set(kt.lf, t)
    elseif (bdict:get(kt.lf) or 0) <= t - b.window_ms then
        return          -- no failure in the window: a success cannot trip it
    end
    local q, f = window(b, kt, ep)
    if q >= b.min_requests and f >= b.failure_threshold and f >= b.failure_ratio * q then
        transition(b, kt, ep, CLOSED, OPEN,
            format("%d failures of %d requests in %d ms", f, q, b.window_ms), q, f)
    end
end

--- log phase: count the request's outcome and release its probe slot.
function _M.record(ctx)
    local b = ctx.tg_brk
    if not b then
        return
    end
    ctx.tg_brk = nil
    local kt, ep = ctx.tg_brk_k, ctx.tg_brk_ep
    local failed = outcome(b)
    if not ctx.tg_brk_probe then
        if failed ~= nil then
            record_closed(b, kt, ep, failed)
        end
        return
    end
    bdict:incr(kt.h .. ep, -1, 0)
    if failed == nil then
        return
    elseif failed then
        transition(b, kt, ep, HALF, OPEN, "half-open probe failed")
    else
        local n = bdict:incr(kt.s .. ep, 1, 0, b.half_ttl)
        if n and n >= b.success_threshold then
            transition(b, kt, ep, HALF, CLOSED, n .. " half-open probes succeeded", nil, n)
        end
    end
end

-- The breakers used on this node, per worker: listed from the dict once when the worker starts
-- (a worker started by a reload finds its predecessors'), then learnt from the worker's own
-- queue (kq<worker id>), into which the first use of a breaker pushes it for every worker — the
-- node report's timer walks no shared dict.
local used

local function learn_used()
    if not used then
        used = {}
        for _, k in ipairs(bdict:get_keys(0)) do   -- once per worker start
            if k:sub(1, 2) == "k|" then
                used[k:sub(3)] = true
            end
        end
    end
    local q = "kq" .. ngx.worker.id()
    for _ = 1, 100000 do
        local K = bdict:lpop(q)
        if not K then
            break
        end
        used[K] = true
    end
end

-- Breaker states of this node ({K = {b, kt}}): every configured breaker plus the per-app ones
-- that have been used (off the request path: compiles a generation no request brought yet).
local function known()
    local gen = cfgcache.generation()
    if gen ~= compiled_gen then
        _M.compile(gen)
    end
    local out = {}
    for name, b in pairs(by_name) do
        if not b.per_app then
            out[name] = { b, keys_of(name) }
        end
    end
    learn_used()
    for K in pairs(used) do
        local b = by_name[match(K, "^[^/]+")]
        if b and (b.per_app and K ~= b.name or K == b.name) then
            out[K] = { b, keys_of(K) }
        end
    end
    return out
end

--- The node report's `breakers` ({"<name>[/<app>]": {state, failures, requests, opened_at,
-- retry_at}}, times in Unix seconds, 0 when not applicable).
function _M.report()
    local out = {}
    for K, e in pairs(known()) do
        local b, kt = e[1], e[2]
        local st, ep = state_of(kt)
        local q, f
        if st == CLOSED then
            q, f = window(b, kt, ep)
        else
            q, f = bdict:get(kt.tq) or 0, bdict:get(kt.tf) or 0
        end
        local at = bdict:get(kt.at)
        out[K] = {
            state = STATE_NAMES[st], failures = f, requests = q,
            opened_at = at and floor(at / 1000) or 0,
            retry_at = st == OPEN and ceil((at + b.open_timeout_ms) / 1000) or 0,
        }
    end
    return out
end

-- /metrics: ratelimit_circuit_state{backend} (the worst state among a backend's breakers)
local function gauges(g)
    for _, e in pairs(known()) do
        local b, kt = e[1], e[2]
        local st = state_of(kt)
        local series = "ratelimit_circuit_state" .. b.label
        local v = st == OPEN and 2 or st
        if (g[series] or -1) < v then
            g[series] = v
        end
    end
end
metrics.add_gauges(gauges)

--- Configured breakers in this worker's generation (0: the request path does nothing).
function _M.count()
    return N
end

return _M
