-- A Redis Cluster handle: what `with(timeout, fn)` gives fn in cluster mode. It behaves like a
-- resty.redis connection for the gateway's commands: each goes to the master of its key's slot
-- (KEYS[1] for EVAL/EVALSHA, the first argument otherwise, any master for keyless commands),
-- follows MOVED (slot map updated, refresh scheduled) and ASK (ASKING first, map unchanged), and
-- retries TRYAGAIN briefly while a slot is half migrated; pipelines are split per node. The
-- handle keeps one connection per node for the call and `finish` returns them to their pools,
-- while a connection that failed or answered READONLY/CLUSTERDOWN/... is closed at once.
local crc16 = require("tollgate.redis.crc16")
local metrics = require("tollgate.metrics")

local slot_of = crc16.slot
local now = ngx.now
local update_time = ngx.update_time
local sleep = ngx.sleep
local get_phase = ngx.get_phase
local byte = string.byte
local sub = string.sub
local match = string.match
local tonumber = tonumber
local select = select
local pairs = pairs
local unpack = unpack

local _M = {}

local MAX_REDIRECTS = 5
local TRYAGAIN_SLEEP = 0.005

-- Commands without a key go to any master; these cannot be split across nodes.
local KEYLESS = { ping = true, echo = true, time = true, info = true, cluster = true }
local UNSUPPORTED = { multi = true, exec = true, watch = true, subscribe = true,
                      psubscribe = true, read_reply = true }

-- "MOVED 5718 127.0.0.1:7001" -> "MOVED", 5718, "127.0.0.1:7001"
local function redirect(err)
    local c = byte(err, 1)
    if c == 77 and sub(err, 1, 6) == "MOVED " or c == 65 and sub(err, 1, 4) == "ASK " then
        local kind, slot, addr = match(err, "^(%u+) (%d+) (%S+)$")
        return kind, tonumber(slot), addr
    end
    if c == 84 and sub(err, 1, 8) == "TRYAGAIN" then
        return "TRYAGAIN"
    end
end

local H = {}    -- methods of a handle
local routed = {}

local function drop(h, addr, red)
    red:close()
    h.conns[addr] = nil
    h.cl:stale()
end

function H.conn(h, addr)
    local red = h.conns[addr]
    if red then
        return red
    end
    local client = h.cl.client
    local err
    red, err = client:connect_to(client:target_of(addr), h.timeout)
    if not red then
        h.cl:stale()
        return nil, err
    end
    h.conns[addr] = red
    return red
end

--- Run command cmd routed by key (nil: any master); queue it inside a pipeline.
function H.call(h, cmd, key, ...)
    local q = h.pipe
    if q then
        q[#q + 1] = { cmd, key, select("#", ...), ... }
        return
    end
    local cl = h.cl
    local addr, err = cl:addr(key, h.timeout)
    if not addr then
        return nil, err
    end
    local asking = false
    for _ = 0, MAX_REDIRECTS do
        local red
        red, err = h:conn(addr)
        if not red then
            return nil, err
        end
        local res
        if asking then
            res, err = red:asking()
        end
        if res ~= nil or not asking then
            res, err = red[cmd](red, ...)
        end
        if res then
            return res, err
        end
        if res == nil then       -- timeout, closed, ...: the connection is unusable
            drop(h, addr, red)
            return nil, err
        end
        local kind, slot, to = redirect(err)
        if kind == "MOVED" then
            metrics.inc('ratelimit_redis_redirects_total{kind="moved"}')
            cl.slots[slot + 1] = to
            cl.sig = nil            -- the next refresh rebuilds the whole map
            cl:stale()
            addr, asking = to, false
        elseif kind == "ASK" then
            metrics.inc('ratelimit_redis_redirects_total{kind="ask"}')
            addr, asking = to, true
        elseif kind == "TRYAGAIN" then
            -- keys of a multi-key script split between the two ends of a migrating slot
            metrics.inc('ratelimit_redis_redirects_total{kind="tryagain"}')
            update_time()
            local phase = get_phase()
            if now() + TRYAGAIN_SLEEP > h.deadline or phase == "log"
                    or phase == "header_filter" or phase == "body_filter" then
                return res, err
            end
            sleep(TRYAGAIN_SLEEP)
            addr, asking = key and cl.slots[slot_of(key) + 1] or addr, false
        else
            if cl.client.is_unavailable(err) then
                drop(h, addr, red)
            end
            return res, err
        end
    end
    return nil, "redis_cluster: too many redirections (" .. tostring(err) .. ")"
end

function H.init_pipeline(h)
    h.pipe = {}
end

function H.cancel_pipeline(h)
    h.pipe = false
end

-- Send the queued commands of one node as one pipeline; redirected ones are run again alone.
local function commit_node(h, addr, q, idx, out)
    local red, err = h:conn(addr)
    if not red then
        return nil, err
    end
    red:init_pipeline(#idx)
    for j = 1, #idx do
        local c = q[idx[j]]
        red[c[1]](red, unpack(c, 4, 3 + c[3]))
    end
    local res
    res, err = red:commit_pipeline()
    if not res then
        drop(h, addr, red)
        return nil, err
    end
    local broken = false
    for j = 1, #idx do
        local r = res[j]
        if type(r) == "table" and r[1] == false and type(r[2]) == "string" then
            if redirect(r[2]) then
                local c = q[idx[j]]
                local v, verr = h:call(c[1], c[2], unpack(c, 4, 3 + c[3]))
                if v == nil then
                    return nil, verr
                end
                r = v or { false, verr }
            elseif h.cl.client.is_unavailable(r[2]) then
                broken = true
            end
        end
        out[idx[j]] = r
    end
    if broken and h.conns[addr] == red then
        drop(h, addr, red)
    end
    return true
end

--- Commit the pipeline: one pipeline per node, replies in the order of the commands (an error
-- reply as {false, err}, as resty.redis gives them).
function H.commit_pipeline(h)
    local q = h.pipe
    if not q then
        return nil, "no pipeline"
    end
    h.pipe = false
    local groups, order = {}, {}
    for i = 1, #q do
        local addr, err = h.cl:addr(q[i][2], h.timeout)
        if not addr then
            return nil, err
        end
        local g = groups[addr]
        if not g then
            g = {}
            groups[addr] = g
            order[#order + 1] = addr
        end
        g[#g + 1] = i
    end
    local out = {}
    for i = 1, #order do
        local ok, err = commit_node(h, order[i], q, groups[order[i]], out)
        if not ok then
            return nil, err
        end
    end
    return out
end

--- Return the call's connections to their pools.
function H.finish(h)
    local client = h.cl.client
    for _, red in pairs(h.conns) do
        client:release(red)
    end
end

function H.set_timeout(h, ms)
    h.timeout = ms
    for _, red in pairs(h.conns) do
        red:set_timeout(ms)
    end
end

local function router(cmd)
    if UNSUPPORTED[cmd] then
        return function()
            error("redis cluster handle: " .. cmd .. " is not supported", 2)
        end
    end
    if cmd == "eval" or cmd == "evalsha" then
        return function(h, script, numkeys, ...)
            local key = tonumber(numkeys) > 0 and (...) or nil
            return h:call(cmd, key, script, numkeys, ...)
        end
    end
    if KEYLESS[cmd] then
        return function(h, ...)
            return h:call(cmd, nil, ...)
        end
    end
    return function(h, ...)
        if select("#", ...) == 0 then
            return h:call(cmd, nil)
        end
        return h:call(cmd, (...), ...)
    end
end

local handle_mt = {
    __index = function(_, name)
        local m = H[name] or routed[name]
        if not m then
            m = router(name)
            routed[name] = m
        end
        return m
    end,
}

--- A handle over slot map `cl` (tollgate.redis.cluster) for one call.
function _M.new(cl, timeout_ms)
    update_time()
    return setmetatable({ cl = cl, timeout = timeout_ms, conns = {}, pipe = false,
                          deadline = now() + timeout_ms / 1000 }, handle_mt)
end

return _M
