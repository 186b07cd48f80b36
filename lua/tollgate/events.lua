-- Sampled events (docs/rules-contract.md §5): any phase calls emit(ev); at most
-- TOLLGATE_EVENTS_PER_SEC entries per second leave this node, the occurrences beyond that are
-- counted per (event_type, app_id, rule_id) and folded into the `sampled` field of the next entry
-- of the same kind. Entries wait in the tollgate_events dict (a list) until worker 0 moves them to
-- the Redis stream `ratelimit:events` about every second (XADD MAXLEN ~ 100000, pipelined); while
-- Redis fails they wait, and what the full queue cannot take is dropped and counted.
-- tollgate_events keys: q (the queue), r:<unix s> (entries queued in that second),
-- f:<type>:<app>:<rule> (occurrences folded since the last entry of that kind).
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local rredis = require("tollgate.redis.client")
local metrics = require("tollgate.metrics")

local edict = ngx.shared.tollgate_events
local now = ngx.now
local log = ngx.log
local WARN = ngx.WARN
local type = type
local tostring = tostring
local floor = math.floor
local sub = string.sub
local encode = cjson.encode
local decode = cjson.decode
local unpack = unpack

local _M = {}

local Q = "q"
local MAX_QUEUE = 10000       -- entries waiting for worker 0; beyond that they are dropped
local BATCH = 500             -- entries per pipeline
local MAXLEN = 100000
local DROPPED = "ratelimit_events_dropped_total"

-- fields of a stream entry in contract order, with their byte limit
local FIELDS = {
    { "event_type", 64 }, { "severity", 16 }, { "app_id", 128 }, { "user_id", 256 },
    { "ip_address", 64 }, { "user_agent", 256 }, { "endpoint", 512 }, { "http_method", 16 },
    { "request_id", 64 }, { "rule_id", 128 }, { "rule_type", 32 }, { "limit_value", 32 },
    { "current_usage", 32 }, { "action_taken", 16 }, { "response_code", 8 },
    { "response_time_ms", 32 }, { "node_id", 128 }, { "reason", 128 },
    { "access_key_id", 128 },
}
local NFIELDS = #FIELDS

local PER_SEC, NODE, redis_client, BG_MS

--- s: settings (events_per_sec, node_id, bg_timeout_ms); client: tollgate.redis.client client (only
-- the draining worker needs it).
function _M.init(s, client)
    PER_SEC, NODE, BG_MS, redis_client = s.events_per_sec, s.node_id, s.bg_timeout_ms, client
end

local function field(v, limit)
    local t = type(v)
    if t == "number" then
        if v == floor(v) and v < 1e15 and v > -1e15 then
            return tostring(floor(v))   -- no "1e+05", no "100.0"
        end
        return tostring(v)
    end
    if t ~= "string" or v == "" then
        return nil
    end
    if #v > limit then
        return sub(v, 1, limit)
    end
    return v
end

local function dropped(n)
    metrics.inc(DROPPED, n)
end

--- The sampling decision alone, for callers that build the event only when it is kept:
-- returns the `sampled` count of an entry to queue now, or nil when the occurrence was folded
-- into a later entry. Never yields, never raises.
function _M.take(event_type, app_id, rule_id)
    if not PER_SEC or type(event_type) ~= "string" then
        return nil
    end
    local fold = "f:" .. event_type .. ":" .. (field(app_id, 128) or "")
        .. ":" .. (field(rule_id, 128) or "")
    local n = edict:incr("r:" .. floor(now()), 1, 0, 2)
    if not n or n > PER_SEC then
        edict:incr(fold, 1, 0)
        return nil
    end
    local folded = edict:get(fold)
    if folded and folded > 0 then
        edict:incr(fold, -folded)    -- what concurrent emits add meanwhile stays for the next
        return 1 + folded
    end
    return 1
end

--- Queue event `ev` that take() kept, standing for `sampled` occurrences.
function _M.push(ev, sampled)
    if type(ev) ~= "table" then
        return false
    end
    local flat, k = {}, 0
    for i = 1, NFIELDS do
        local f = FIELDS[i]
        local v = field(ev[f[1]], f[2])
        if v then
            flat[k + 1], flat[k + 2] = f[1], v
            k = k + 2
        end
    end
    if ev.node_id == nil then
        flat[k + 1], flat[k + 2] = "node_id", NODE
        k = k + 2
    end
    flat[k + 1], flat[k + 2] = "sampled", tostring(sampled or 1)
    flat[k + 3], flat[k + 4] = "created_at", tostring(floor(now() * 1000))
    local len = edict:llen(Q)
    if len and len >= MAX_QUEUE then
        dropped(1)
        return false
    end
    local payload = encode(flat)
    if not payload or not edict:rpush(Q, payload) then
        dropped(1)
        return false
    end
    return true
end

--- Queue event `ev` (a table of docs/rules-contract.md §5 fields) unless this second's budget is
--- spent.
-- Never yields, never raises; returns true when an entry was queued.
function _M.emit(ev)
    if type(ev) ~= "table" then
        return false
    end
    local sampled = _M.take(ev.event_type, ev.app_id, ev.rule_id)
    if not sampled then
        return false
    end
    return _M.push(ev, sampled)
end

--- Entries waiting in this node's queue.
function _M.queued()
    return edict:llen(Q) or 0
end

local function send(red, batch)
    local stream = keys.events_stream()
    red:init_pipeline(#batch)
    for i = 1, #batch do
        red:xadd(stream, "MAXLEN", "~", MAXLEN, "*", unpack(batch[i]))
    end
    local res, err = red:commit_pipeline()
    if not res then
        return nil, err
    end
    local perr = rredis.pipeline_error(res)
    if perr and rredis.is_unavailable(perr) then
        return nil, perr    -- e.g. READONLY: with() closes the connection, drain() requeues
    end
    local bad = 0
    for i = 1, #res do
        local r = res[i]
        if type(r) == "table" and r[1] == false then
            bad = bad + 1
            err = r[2]
        end
    end
    return #batch - bad, err
end

-- Put entries Redis did not take back at the head of the queue, oldest first; what does not
-- fit is dropped.
local function requeue(raw)
    local lost = 0
    for i = #raw, 1, -1 do
        local len = edict:llen(Q) or 0
        if len >= MAX_QUEUE or not edict:lpush(Q, raw[i]) then
            lost = lost + 1
        end
    end
    return lost
end

--- Worker 0, about every second: move the queue to the stream. Entries wait in the queue while
-- Redis cannot take them; they are dropped (and counted) when the queue is full.
function _M.drain()
    if not redis_client then
        return 0
    end
    local sent = 0
    for _ = 1, MAX_QUEUE / BATCH do
        local batch, raw = {}, {}
        for _ = 1, BATCH do
            local v = edict:lpop(Q)
            if not v then
                break
            end
            local e = decode(v)
            if type(e) == "table" then
                batch[#batch + 1] = e
                raw[#raw + 1] = v
            else
                dropped(1)
            end
        end
        if #batch == 0 then
            break
        end
        local ok, err = redis_client:with(BG_MS, send, batch)
        if not ok then
            local lost = requeue(raw)
            if lost > 0 then
                dropped(lost)
            end
            log(WARN, "tollgate: events not written (", #raw - lost, " kept, ", lost,
                " dropped): ", err)
            break
        end
        if ok < #batch then
            dropped(#batch - ok)
            log(WARN, "tollgate: ", #batch - ok, " events dropped: ", err)
        end
        sent = sent + ok
        if #batch < BATCH then
            break
        end
    end
    return sent
end

--- init_worker of worker 0: drain every `interval` seconds.
function _M.start(interval)
    local ok, err = ngx.timer.every(interval or 1, function(premature)
        if not premature then
            _M.drain()
        end
    end)
    if not ok then
        log(ngx.ERR, "tollgate: cannot start the events drain: ", err)
    end
end

return _M
