-- Test endpoints of the integration suites: call tollgate's modules inside nginx.
local cjson = require("cjson.safe")
local cfgcache = require("tollgate.config.cache")
local shm = require("tollgate.shm")
local l3 = require("tollgate.lease.bucket")
local s3 = require("tollgate.s3")
local handler = require("tollgate.handler")

local dict = shm.dict
local _M = {}

local function reply(t)
    ngx.header["Content-Type"] = "application/json"
    ngx.print(cjson.encode(t))
end

local function app_arg()
    local id = ngx.var.arg_app
    local a = id and cfgcache.app(id)
    if not a then
        ngx.status = 404
        reply({ error = "unknown app " .. tostring(id) })
        return ngx.exit(404)
    end
    return a
end

local actions = {}

function actions.state()
    local id = ngx.var.arg_app
    local k = shm.keys(id)
    local pc, pn = shm.peek_pending(k)
    reply({
        tokens = dict:get(k.tokens) or 0,
        pending_cost = pc,
        pending_count = pn,
        debt = dict:get(k.debt) or 0,
        target = dict:get(k.target) or 0,
        fail_open = dict:get(k.fail_open) or 0,
        rollback_count = dict:get(k.rollback_count) or 0,
        neg = dict:get(k.neg) or 0,
        inflight = dict:get(k.inflight) or "",
    })
end

-- set the lease of an app and clear its local accounting
function actions.set()
    local a = app_arg()
    local k = shm.keys(a.id)
    dict:set(k.tokens, tonumber(ngx.var.arg_tokens) or 0)
    dict:set(k.pending, 0)
    dict:set(k.pending_cost, 0)
    dict:set(k.pending_count, 0)
    dict:set(k.debt, 0)
    dict:delete(k.neg)
    -- as after a grant: the node holds state of the app and knows how many nodes share it
    -- (one, or ?nodes=), so that its next grant asks for a reserve
    dict:set(k.nodes, tonumber(ngx.var.arg_nodes) or 1)
    require("tollgate.lease.active").mark(a.id)
    reply({ ok = true })
end

function actions.acquire()
    local a = app_arg()
    local ok, x, y = l3.acquire(a, tonumber(ngx.var.arg_cost))
    if ok then
        reply({ ok = true, remaining = x, source = y })
    else
        reply({ ok = false, reason = x })
    end
end

function actions.charge()
    local a = app_arg()
    l3.charge(a, tonumber(ngx.var.arg_amount))
    reply({ ok = true })
end

function actions.rollback()
    local a = app_arg()
    l3.rollback(a, tonumber(ngx.var.arg_cost))
    reply({ ok = true })
end

function actions.cost()
    local args = ngx.req.get_uri_args()
    local bucket, key = s3.address(nil, args.path)
    local op, err = s3.operation(args.method, bucket == nil and "service" or key == nil and "bucket"
        or "object", args.query, args.copy == "1")
    if not op then
        return reply({ error = err })
    end
    local calc = handler.calculator()
    reply({ op = op, cost = calc:calculate(op, tonumber(args.bytes) or 0,
                                           tonumber(args.c_bw) or 1) })
end

-- flushes of the metrics each worker has finished
function actions.flushes()
    reply(require("tollgate.metrics").flushes())
end

function actions.settings()
    reply(handler.settings())
end

-- Connection limiter ------------------------------------------------------------------------
local connlimit = require("tollgate.conn.limiter")
local conntrack = require("tollgate.conn.track")
local conncleanup = require("tollgate.conn.cleanup")
local cdict = ngx.shared.connlimit_dict

-- app and cluster of ?app= (its config's cluster) or ?app=&cluster= (any valid ids)
local function conn_target()
    local id, cluster = ngx.var.arg_app, ngx.var.arg_cluster
    if not cluster then
        local a = id and cfgcache.app(id)
        cluster = a and a.cluster
    end
    return id, cluster
end

function actions.conn_state()
    local id, cluster = conn_target()
    reply(connlimit.state(id, cluster))
end

-- ?app=&max=&burst= or ?cluster=&max=&ratio= (no max: back to the defaults)
function actions.conn_limits()
    local max = tonumber(ngx.var.arg_max)
    local ok, err
    if ngx.var.arg_app then
        ok, err = connlimit.set_app_limits(ngx.var.arg_app, max, tonumber(ngx.var.arg_burst))
    else
        ok, err = connlimit.set_cluster_limits(ngx.var.arg_cluster, max,
            tonumber(ngx.var.arg_ratio))
    end
    reply({ ok = ok or false, error = err })
end

-- Keep this worker's event loop busy for ?ms=N milliseconds (a CPU stall, no yield).
function actions.spin()
    ngx.update_time()
    local t0 = ngx.now()
    local ms = tonumber(ngx.var.arg_ms) or 100
    repeat
        ngx.update_time()
    until ngx.now() - t0 >= ms / 1000
    reply({ pid = ngx.worker.pid(), ms = ms })
end

-- Run a script of operations in this worker, e.g. ops=a,a,r1,r1,l2:400,c,s2 :
-- a acquire (handle = its position among the a's), rK release handle K, lK:S lose handle K's
-- log phase with its last_seen S seconds back, hK:S stall handle K's worker for S seconds (it
-- releases the handle later), dK:S handle K's worker died S seconds ago before any heartbeat
-- (its record still compact), c one cleanup run, sK the tracking record of handle K.
-- Every step answers its result and the counters after it.
function actions.conn_ops()
    local id, cluster = conn_target()
    local a = { id = id, cluster = cluster }
    local ctxs, steps = {}, {}
    for op in (ngx.var.arg_ops or ""):gmatch("[^,]+") do
        local kind, k, age = op:match("^(%a)(%d*):?([%d.]*)$")
        local ctx = ctxs[tonumber(k) or 0]
        local r = { op = op }
        if kind == "a" then
            ctx = {}
            ctxs[#ctxs + 1] = ctx
            r.ok, r.reason = connlimit.acquire(a, ctx)
            r.handle = #ctxs
            ctx.t_slot = ctx.tg_conn
            ctx.t_claim = ctx.tg_conn and conntrack.claim_of(ctx.tg_conn)
        elseif kind == "r" then
            r.released = connlimit.release(ctx)
        elseif kind == "l" then
            local claim
            r.ok, claim = conntrack.abandon(ctx.tg_conn, ctx.tg_conn_rid, tonumber(age))
            ctx.t_claim = claim or ctx.t_claim
            ctx.tg_conn = nil      -- its request is gone: no log phase will release it
        elseif kind == "h" then
            local claim
            r.ok, claim = conntrack.abandon(ctx.tg_conn, ctx.tg_conn_rid, tonumber(age), true)
            ctx.t_claim = claim or ctx.t_claim
        elseif kind == "d" then
            local claim
            r.ok, claim = conntrack.orphan(ctx.tg_conn, ctx.tg_conn_rid, tonumber(age))
            ctx.t_claim = claim or ctx.t_claim
            ctx.tg_conn = nil      -- its worker "died": no log phase will release it
        elseif kind == "c" then
            r.leaked = connlimit.cleanup()
        elseif kind == "s" then
            r.record = ctx.t_slot and conntrack.inspect(ctx.t_slot, ctx.tg_conn_rid,
                ctx.t_claim)
        else
            ngx.status = 400
            return reply({ error = "bad op " .. op })
        end
        r.state = connlimit.state(id, cluster)
        steps[#steps + 1] = r
    end
    reply(steps)
end

function actions.conn_cleanup()
    local leaked, work = connlimit.cleanup()
    reply({ leaked = leaked, work = work })
end

-- The config generation as this worker sees it: its mirror page and config_dict.
function actions.generation()
    local p = require("tollgate.config.genpage").page()
    reply({ pid = ngx.worker.pid(), page = p and p[0] or nil, dict = cfgcache.generation(),
            addr = p and string.format("%.0f", tonumber(require("ffi").cast("uintptr_t", p))) })
end

-- Move the config generation (from whichever worker answers).
function actions.bump()
    cfgcache.bump()
    reply({ pid = ngx.worker.pid(), dict = cfgcache.generation() })
end

function actions.conn_workers()
    reply(conncleanup.workers())
end

-- The records of generation ?gen=: its slots' records (t:<g>:<n>) by value, FREE (released)
-- or held; whether its wt:/wp: keys exist; and how many t: / ts: / ti: dict keys it has.
function actions.conn_keys()
    local g = tonumber(ngx.var.arg_gen)
    local held, free = conncleanup.slots(g, cdict:get("wt:" .. g))
    local tkeys = 0
    for _, k in ipairs(cdict:get_keys(0)) do
        for _, p in ipairs({ "t:", "ts:", "ti:" }) do
            if k:sub(1, #p + #tostring(g) + 1) == p .. g .. ":" then
                tkeys = tkeys + 1
            end
        end
    end
    reply({ free = free, held = held, wt = cdict:get("wt:" .. g) ~= nil,
            wp = cdict:get("wp:" .. g) ~= nil,
            dict_keys = tkeys })
end

-- A backend that holds the request until /_t/conn_unhold?name= (or ?ms= passed) and records
-- how many requests of `name` it held at once.
function actions.conn_hold()
    local name = ngx.var.arg_name or "-"
    local v = cdict:incr("test:hold:" .. name, 1, 0)
    cdict:set("test:seen:" .. name .. ":" .. v, true)
    local deadline = ngx.now() + (tonumber(ngx.var.arg_ms) or 30000) / 1000
    while not cdict:get("test:go:" .. name) and ngx.now() < deadline do
        ngx.sleep(0.01)
    end
    cdict:incr("test:hold:" .. name, -1)
    ngx.print("held")
end

function actions.conn_unhold()
    cdict:set("test:go:" .. (ngx.var.arg_name or "-"), true)
    reply({ ok = true })
end

function actions.conn_held()
    local name = ngx.var.arg_name or "-"
    local max = 0
    while cdict:get("test:seen:" .. name .. ":" .. (max + 1)) do
        max = max + 1
    end
    reply({ now = cdict:get("test:hold:" .. name) or 0, max = max })
end

-- The backend fails on command: /_t/fail?status=503[&count=N][&ratio=R] makes it answer
-- `status` (to the next N requests, or to a share R of them, or to all until /_t/heal).
-- /_t/backend_hits counts the requests the backend served.
local tdict = ngx.shared.config_dict

function actions.fail()
    local status = tonumber(ngx.var.arg_status) or 503
    tdict:set("test:fail:status", status)
    tdict:set("test:fail:left", tonumber(ngx.var.arg_count) or -1)
    tdict:set("test:fail:ratio", tonumber(ngx.var.arg_ratio) or 1)
    reply({ status = status })
end

function actions.heal()
    tdict:delete("test:fail:status")
    reply({ ok = true })
end

function actions.breakers()
    -- this worker on the current generation first, as a request would bring it
    require("tollgate.config.cache").refresh()
    reply(require("tollgate.breaker.breaker").report())
end

function actions.backend_hits()
    reply({ hits = tdict:get("test:backend:hits") or 0 })
end

local function failing()
    local status = tdict:get("test:fail:status")
    if not status then
        return nil
    end
    if (tdict:get("test:fail:left") or -1) >= 0 then
        local n = tdict:incr("test:fail:left", -1)
        if not n or n < 0 then
            return nil
        end
        return status
    end
    if math.random() < (tdict:get("test:fail:ratio") or 1) then
        return status
    end
    return nil
end

function _M.handle()
    local name = ngx.var.uri:match("^/_t/([%w_]+)$")
    local fn = name and actions[name]
    if not fn then
        ngx.status = 404
        return reply({ error = "no test action " .. tostring(name) })
    end
    return fn()
end

-- The body's length and MD5 (hex), read whole.
local function digest()
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if not body then
        local path = ngx.req.get_body_file()
        local f = path and io.open(path, "rb")
        body = f and f:read("*a") or ""
        if f then
            f:close()
        end
    end
    return #body, ngx.md5(body)
end

-- The storage backend: ?size=N answers N bytes (?cl=1: with a Content-Length), ?ms=N waits
-- first, ?code=N answers that status (so does every request while /_t/fail is in force),
-- ?digest answers the body's length and MD5 in X-Test-Body. Every answer says what arrived:
-- X-Test-Uri (the request target as received), X-Test-TE (its Transfer-Encoding) and
-- X-Test-Hits (requests the backend saw so far).
function _M.backend()
    ngx.header["X-Test-Uri"] = ngx.var.request_uri
    ngx.header["X-Test-TE"] = ngx.var.http_transfer_encoding or ""
    local args = ngx.req.get_uri_args()
    if args.digest then
        local n, md5 = digest()
        ngx.header["X-Test-Body"] = n .. " " .. md5
    else
        ngx.req.read_body()   -- a storage backend reads an upload before it answers
    end
    ngx.header["X-Test-Hits"] = tdict:incr("test:backend:hits", 1, 0)
    local ms = tonumber(args.ms)
    if ms then
        ngx.sleep(ms / 1000)
    end
    local code = tonumber(args.code) or failing()
    if code then
        return ngx.exit(code)
    end
    local n = tonumber(args.size)
    if not n then
        return ngx.print("ok")
    end
    if args.cl then     -- ?cl=1: a Content-Length (else the answer is chunked)
        ngx.header["Content-Length"] = n
    end
    local chunk = string.rep("x", 65536)
    while n > 0 do
        local m = n < 65536 and n or 65536
        ngx.print(m == 65536 and chunk or chunk:sub(1, m))
        n = n - m
    end
end

return _M
