-- nginx phase entry points of tollgate. Everything else lives in the modules this one wires.
--   init()        init_by_lua:        settings, scripts read from disk
--   init_worker() init_worker_by_lua: Redis client, timers (worker 0: sync, config watch)
--   access()      access_by_lua:      identify, classify, connection slot, cost, rules, L3
--                                     acquire or 4xx
--   log()         log_by_lua:         post-hoc charges, rollback of cancelled requests, metrics
--   health(), metrics()               content handlers, never limited
local config = require("tollgate.config.apps")
local keys = require("tollgate.keys")
local cost_mod = require("tollgate.cost")
local scripts = require("tollgate.redis.scripts")
local rredis = require("tollgate.redis.client")
local metrics = require("tollgate.metrics")
local response = require("tollgate.request.response")
local numvar = require("tollgate.request.numvar")
local shm = require("tollgate.shm")
local l3 = require("tollgate.lease.bucket")
local sync = require("tollgate.lease.sync")
local watch = require("tollgate.config.watch")
local deg = require("tollgate.redis.degradation")
local emergency = require("tollgate.lease.emergency")
local connlimit = require("tollgate.conn.limiter")
local reservation = require("tollgate.lease.reservation")
local rules = require("tollgate.rules.check")
local events = require("tollgate.events")
local breaker = require("tollgate.breaker.breaker")

local reqstate = require("tollgate.request.state")
local reqheaders = require("tollgate.request.headers")
local ipmatch = require("tollgate.request.ipmatch")
local s3 = require("tollgate.s3")
local identity = require("tollgate.identity")

local cjson = require("cjson.safe")

-- The build's version: tollgate_build.lua next to the tollgate/ directory, written by the
-- gateway renders (scripts/render-gateway.sh, the test harness), make install and make dist
-- (scripts/version.sh); "dev" without it.
local VERSION = "dev"
do
    local ok, build = pcall(require, "tollgate_build")
    if ok and type(build) == "table" and type(build.version) == "string" then
        VERSION = build.version
    end
end
local get_method = ngx.req.get_method
local var = ngx.var
local type = type
local tonumber = tonumber
local find = string.find

local _M = {}

local conf, redis_scripts, redis_client, calculator
local DOMAINS           -- TOLLGATE_S3_DOMAINS (nil without: every request is path-style)

local KNOWN_METHODS = { GET = true, HEAD = true, PUT = true, POST = true, DELETE = true,
                        PATCH = true, OPTIONS = true }

-- LuaJIT limits for the request path. access() is one long function whose shared-dict calls
-- LuaJIT inlines into a single trace; with the VM's defaults that trace aborts ("loop unroll
-- limit reached", "trace too long"), gets blacklisted and the whole path runs in the
-- interpreter. Measured with `go run ./bench/cmd/tollgate-callgrind`: the access phase drops
-- from about 32k to 23k instructions per request with these limits. They are VM-wide, so an nginx
-- that runs other Lua can keep its own with TOLLGATE_JIT_TUNE=off.
local JIT_LIMITS = { "maxrecord=20000", "maxirconst=2000", "maxsnap=1000", "loopunroll=60" }

local function tune_jit(mode)
    if mode == "on" and jit and jit.opt then
        jit.opt.start(unpack(JIT_LIMITS))
    end
end

function _M.init(opts)
    conf = config.settings(opts)
    tune_jit(conf.jit_tune)
    -- the config generation's mirror, mapped before the workers fork (a plain read per request)
    local _, gerr = config.share_generation()
    if gerr then
        ngx.log(ngx.WARN, "tollgate: no shared page for the config generation (", gerr,
            "); every request reads it from config_dict")
    end
    connlimit.configure(conf)
    local set, err = scripts.load(conf.scripts_dir)
    if not set then
        error("tollgate: " .. err, 0)
    end
    redis_scripts = set
    local costs = conf.costs
    if costs == nil then
        local perr
        costs, perr = cost_mod.parse_list(conf.cost_list)
        if not costs then
            error("tollgate: TOLLGATE_COSTS: " .. perr, 0)
        end
    end
    local calc, cerr = cost_mod.new({ base = costs }, conf.chunked_estimate)
    if not calc then
        error("tollgate: " .. cerr, 0)
    end
    calculator = calc
    identity.configure(conf)
    DOMAINS = identity.DOMAINS[1] and identity.DOMAINS or nil
    -- the headers the request path reads (identity, price, reservation estimates); rules and
    -- events read the rest through reqheaders.all
    reqheaders.want(conf.app_header:lower())
    for _, name in ipairs({ "transfer-encoding", "content-length", "x-amz-copy-source",
                            "x-tollgate-expected-size", "x-amz-decoded-content-length",
                            "range" }) do
        reqheaders.want(name)
    end
    for _, name in ipairs(identity.headers()) do
        reqheaders.want(name)
    end
end

function _M.init_worker()
    if not conf then
        _M.init()
    end
    deg.init(conf)
    deg.start()
    config.on_generation(identity.flush)
    config.publish_generation(true)
    local client, err = rredis.new({
        url = conf.redis_url, pool_size = conf.pool_size,
        on_start = deg.mark,
        on_result = function(rerr, unavailable, sec, mark)
            metrics.redis_latency(sec)
            local stalled = deg.stalled(sec, mark)
            deg.observe(sec - stalled)
            -- a timeout that is mostly this worker's own stall says nothing about Redis
            deg.result(rerr, unavailable and stalled < sec / 2)
        end,
    })
    if not client then
        error("tollgate: " .. err, 0)
    end
    redis_client = client
    -- Sentinel master / cluster slot map upkeep
    local ok, serr = redis_client:start(conf.bg_timeout_ms)
    if not ok then
        ngx.log(ngx.ERR, "tollgate: cannot start redis topology upkeep: ", serr)
    end
    l3.init(conf, redis_client, redis_scripts)
    sync.init(conf, redis_client, redis_scripts)
    reservation.init(conf)
    rules.init(conf, redis_client, redis_scripts)
    watch.init(conf, redis_client)
    -- apps a full config_dict has no room for: one HGET on the request path, then cached
    local apps_index = keys.apps_index()
    config.set_lookup(function(id)
        return redis_client:with(conf.op_timeout_ms, function(red)
            local json, herr = red:hget(apps_index, id)
            if not json then
                return nil, herr
            end
            return json ~= ngx.null and json or false
        end)
    end)
    events.init(conf, redis_client)
    connlimit.start(conf, redis_client)
    ngx.timer.every(1, function(premature)
        if not premature then
            metrics.flush()
            config.publish_generation()
        end
    end)
    local worker0 = ngx.worker.id() == 0
    ngx.timer.every(0.25, function(premature)
        if not premature then
            deg.publish()
            if worker0 then
                deg.evaluate()
            end
        end
    end)
    if worker0 then
        ngx.timer.every(math.min(10, conf.reservation_timeout / 2), function(premature)
            if not premature then
                reservation.sweep()
            end
        end)
        ngx.timer.every(conf.sync_interval, function(premature)
            if not premature then
                sync.tick()
                rules.push_stats()      -- at most once a second
            end
        end)
        watch.start()
        events.start(1)
    end
end

local function reject_invalid(ctx, reason, message, status)
    ctx.tg_label = "_invalid"
    return response.refuse(status or 400, reason, message)
end

-- ratelimit_rejected_total{app_id,reason} (ids are validated; reasons come from a fixed set)
local function count_rejection(id, reason)
    metrics.inc('ratelimit_rejected_total{app_id="' .. id .. '",reason="' .. reason .. '"}')
end

-- request_blocked event of a rejection (the table is built only when sampling keeps it)
local function blocked_event(headers, id, reason, rule_type, status, limit, current)
    local sampled = events.take("request_blocked", id, nil)
    if not sampled then
        return
    end
    local ua = reqheaders.all(headers)["user-agent"]
    events.push({
        event_type = "request_blocked", severity = "warning", app_id = id,
        ip_address = var.remote_addr, user_agent = type(ua) == "string" and ua or nil,
        endpoint = var.uri, http_method = get_method(), request_id = var.request_id,
        rule_type = rule_type, limit_value = limit, current_usage = current,
        action_taken = "blocked", response_code = status, reason = reason,
        access_key_id = (reqstate.current() or {}).tg_akid or nil,
    }, sampled)
end

-- Messages of identity refusals (reason -> status, message)
local IDENTITY_REFUSALS = {
    missing_app_id = { 400, "no S3 credentials, no app header and no owner of the bucket" },
    duplicate_app_id = { 400, "send exactly one app header" },
    invalid_access_key = { 403, "the access key id is malformed" },
    unknown_access_key = { 403, "the access key id is not known to the gateway" },
}

-- Keys a DeleteObjects request deletes: the <Object> elements of its body (read up to
-- identity.DELETE_MAX bytes; a larger body is charged S3's maximum of 1000 keys).
local function delete_keys(headers)
    local len = tonumber(headers["content-length"])
    if len and len > identity.DELETE_MAX then
        return 1000
    end
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if not body then
        local path = ngx.req.get_body_file()
        local f = path and io.open(path, "rb")
        if not f then
            return 1
        end
        body = f:read(identity.DELETE_MAX)
        f:close()
    end
    local n = s3.count_objects(body)
    if n < 1 then
        return 1
    end
    return n
end

function _M.access()
    local ctx = reqstate.open()
    local headers = reqheaders.read(ctx.h)
    local method = get_method()
    local q = reqheaders.query()
    local uri = var.uri
    local vbucket = DOMAINS and s3.vhost_bucket(headers.host, DOMAINS) or nil
    local op = s3.operation(method, s3.level(vbucket, uri), q, headers["x-amz-copy-source"] ~= nil)
    if not config.current() then
        config.refresh()            -- the access key and bucket maps of the current config
    end
    local id, why, akid = identity.identify(ctx, headers, q, op, vbucket, uri)
    if id then
        akid, why = why, nil
    end
    ctx.tg_akid = akid or false
    if not id then
        if why == "unknown_access_key" and config.version() == nil then
            id = "_s3"      -- no config was ever loaded: fail-open below, one budget for keys
        else
            local r = IDENTITY_REFUSALS[why]
            return reject_invalid(ctx, why, r[2], r[1])
        end
    end
    local a = config.cached(id)
    if not a then
        if not keys.valid_id(id) then
            return reject_invalid(ctx, "invalid_app_id",
                "app ids must match ^[A-Za-z0-9_-]{1,128}$")
        end
        a = config.app(id)
    end
    if a == false then
        ctx.tg_label = "_unknown"
        return response.refuse(403, "unknown_app", "no such app")
    end
    if not op then
        return reject_invalid(ctx, "unsupported_method",
            "method " .. method .. " is not supported", 405)
    end
    local nkeys
    if op == "DeleteObjects" then
        nkeys = delete_keys(headers)
    end
    if a == nil then
        -- no config was ever loaded (Redis unreachable since start): admit from fail-open
        local ok = l3.fail_open({ id = id }, shm.keys(id), 1)
        ctx.tg_label = "_unconfigured"
        if not ok then
            blocked_event(headers, id, "fail_open_exhausted", "tier", 429)
            return response.too_many("fail_open_exhausted", 1, 1, { remaining = 0 })
        end
        return
    end
    if not a.enabled then
        ctx.tg_label = id
        return response.refuse(403, "app_disabled", "the app is disabled")
    end
    -- circuit breaker of the location's backend: refused before anything is charged
    local bok, backend, bretry = breaker.check(id, ctx)
    if not bok then
        ctx.tg_label = id
        metrics.blocked(id)
        blocked_event(headers, id, "circuit_open", "breaker", 503)
        return response.unavailable(backend, bretry)
    end
    -- connection limiter: a slot before cost and token bucket; log() gives it back (DESIGN §6)
    local cok, creason, climit, ccurrent = connlimit.acquire(a, ctx)
    if not cok then
        ctx.tg_label = id
        blocked_event(headers, id, creason, "connection", 429, climit, ccurrent)
        return connlimit.refuse(creason)
    end

    local cost, estimate, reserve, chunked = calculator:price(a, op, headers, nkeys)
    -- rules after the connection slot and the price, before the tiers: a rule rejection
    -- charges no tier tokens, and log() gives the slot back
    local rule, rretry, rremaining, dup = rules.check(a, method, headers, cost)
    if rule then
        ctx.tg_label = id
        if dup then
            return response.refuse(400, "duplicate_header", "send exactly one " .. dup
                .. " header: rule " .. rule.id .. " counts requests by it")
        end
        count_rejection(id, "rule_limited")
        local retry = math.ceil(rretry)
        if retry < 1 then
            retry = 1
        end
        return response.too_many("rule_limited", cost, retry,
            { reset = ngx.now() + retry, remaining = rremaining }, nil, rule.id)
    end
    local em = emergency.blocked(a)
    if em then
        ctx.tg_label = id
        local info = { reset = em, remaining = 0 }
        count_rejection(id, "emergency_blocked")
        blocked_event(headers, id, "emergency_blocked", "tier", 429, nil, cost)
        return response.too_many("emergency_blocked", cost, l3.retry_after(info), info)
    end
    local covered = 0
    if op == "UploadPart" then
        covered = reservation.draw(a, uri, cost - calculator.base[op])
    end
    local charge = cost + estimate + reserve - covered
    local ok, x, y = l3.acquire(a, charge)
    ctx.tg_label = id
    ctx.tg_method = method
    if not ok then
        reservation.undraw(a, uri, covered)
        if x == "app_disabled" then
            return response.refuse(403, x, "the app is disabled")
        end
        local retry = l3.retry_after(y)
        count_rejection(id, x)
        blocked_event(headers, id, x, "tier", 429, a.guaranteed, charge)
        return response.too_many(x, charge, retry, y, { quota = a.guaranteed, window = 1 })
    end
    if reserve > 0 and not reservation.open(a, uri, reserve) then
        l3.refund(a, reserve, y)
        reserve = 0
    end
    ctx.tg_app = a
    ctx.tg_cost = charge - reserve  -- what a cancellation gives back to the lease
    ctx.tg_total = cost
    ctx.tg_covered = covered
    ctx.tg_estimate = estimate
    ctx.tg_reserve = reserve
    ctx.tg_chunked = chunked
    ctx.tg_op = op
    ctx.tg_source = y          -- "fail_open" or nil (lease)
    -- emitted by the add_header lines of nginx/tollgate_location.conf
    numvar.set("tg_c", cost)
    numvar.set("tg_r", x)
end

-- Did the upstream answer anything? ($upstream_bytes_received: "0", "0, 153", nil w/o upstream)
local function upstream_answered()
    local b = var.upstream_bytes_received
    return b ~= nil and find(b, "[1-9]") ~= nil
end

-- A request the backend refused as unauthenticated, refunded: counted by app (a bounded label),
-- per client IP in a one-minute window of its own dict (never a label; a spray from many
-- addresses evicts only other addresses' counts), and an event carrying the IP, that count and
-- the access key id.
local AUTH_WINDOW = 60
local afdict = ngx.shared.tollgate_authfail     -- nil in an nginx without the http include's dict
local function auth_failed(ctx, label, method, status)
    metrics.inc('ratelimit_auth_failures_total{app_id="' .. label .. '"}')
    local headers = reqheaders.all(ctx.h)
    local ip = ipmatch.client(var.remote_addr, headers["x-forwarded-for"], conf.trusted_proxies)
    local n = afdict and afdict:incr(tostring(ip), 1, 0, AUTH_WINDOW)
    local sampled = events.take("auth_failed", label, nil)
    if not sampled then
        return
    end
    local ua = headers["user-agent"]
    events.push({
        event_type = "auth_failed", severity = "warning", app_id = label,
        ip_address = ip, user_agent = type(ua) == "string" and ua or nil,
        endpoint = var.uri, http_method = method, request_id = var.request_id,
        current_usage = n, action_taken = "refunded", response_code = status,
        reason = "backend_refused_credentials", access_key_id = ctx.tg_akid or nil,
    }, sampled)
end

local function log_request(ctx)
    if ctx.tg_conn then
        connlimit.release(ctx)      -- connection limiter first, whatever answered the request
    end
    if ctx.tg_brk then
        breaker.record(ctx)         -- the backend's answer (or failure) feeds its breaker
    end
    local label = ctx.tg_label
    if not label then
        return
    end
    local method = ctx.tg_method or get_method()
    if not KNOWN_METHODS[method] then
        method = "OTHER"
    end
    local status = ngx.status
    local a = ctx.tg_app
    if not a then
        metrics.request(label, method, status, nil)
        return
    end
    local op = ctx.tg_op
    local cancelled = (status == 499 or status >= 500) and not upstream_answered()
    -- the backend refused the request as unauthenticated (forged or unknown credentials)
    local denied = (status == 401 or status == 403) and upstream_answered()
    if cancelled or denied then
        l3.rollback(a, ctx.tg_cost, ctx.tg_source)
        reservation.undraw(a, var.uri, ctx.tg_covered)
        if ctx.tg_reserve > 0 then
            reservation.close(a, var.uri)
        end
        metrics.request(label, method, status, nil)
        if denied then
            metrics.operation(op, 0)
            auth_failed(ctx, label, method, status)
        end
        return
    end
    local actual = 0
    if ctx.tg_chunked then
        -- nginx sets $content_length to the de-chunked size once it has read the body
        actual = calculator:bandwidth(tonumber(var.content_length) or 0, a.c_bw, ctx.tg_total)
    elseif cost_mod.DOWNLOAD[op] then
        local sent = tonumber(var.body_bytes_sent) or 0
        actual = calculator:bandwidth(sent, a.c_bw, ctx.tg_total)
        cost_mod.observe_download(a, sent)
    end
    if ctx.tg_estimate > 0 or actual > 0 then
        reservation.settle(a, ctx.tg_estimate, actual, ctx.tg_source)
    end
    if (op == "CreateMultipartUpload" and ctx.tg_reserve > 0 and status >= 300)
            or ((op == "CompleteMultipartUpload" or op == "AbortMultipartUpload")
                and status < 300) then
        reservation.close(a, var.uri)
    end
    metrics.request(label, method, status, ctx.tg_total + actual)
    metrics.operation(op, ctx.tg_total + actual)
end

function _M.log()
    local ctx = reqstate.take()     -- nil when access() did not run for this request
    if ctx then
        log_request(ctx)
        reqstate.release(ctx)
    end
end

function _M.health()
    ngx.header["Content-Type"] = "application/json"
    local lost = config.store_lost()
    ngx.print(cjson.encode({
        -- 200 either way: the gateway keeps enforcing its last good config and must stay in
        -- its load balancer; the status says what monitoring must see
        status = lost and "config_store_lost" or "ok",
        reason = lost and (lost .. ": the config store is not the one this gateway knew; "
            .. "serving the last good config until it is restored") or nil,
        node_id = conf.node_id,
        redis = deg.is_open() and "unavailable" or "ok",
        degradation_level = deg.level(),
        config_version = config.version(),
        config_epoch = config.epoch(),
        mode = conf.mode,
        version = VERSION,
    }))
end

-- Each module adds the gauges it owns (metrics.add_gauges); this one adds the build's.
function _M.metrics()
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.print(metrics.render({
        ['tollgate_build_info{component="gateway",node_id="' .. conf.node_id .. '",version="'
            .. VERSION .. '"}'] = 1,
    }))
end

--- The build's version (tollgate_build.lua, else "dev").
function _M.version()
    return VERSION
end

function _M.settings()
    return conf
end

function _M.calculator()
    return calculator
end

return _M
