-- The access phase (access_by_lua): identify the app, classify and price the request, take a
-- connection slot, check the rules, acquire the cost from the lease (L3) — or refuse with a 4xx
-- in the dialect the client speaks. tollgate.handler wires it as access().
local config = require("tollgate.config.apps")
local keys = require("tollgate.keys")
local metrics = require("tollgate.metrics")
local response = require("tollgate.request.response")
local numvar = require("tollgate.request.numvar")
local shm = require("tollgate.shm")
local l3 = require("tollgate.lease.bucket")
local emergency = require("tollgate.lease.emergency")
local connlimit = require("tollgate.conn.limiter")
local reservation = require("tollgate.lease.reservation")
local rules = require("tollgate.rules.check")
local events = require("tollgate.events")
local breaker = require("tollgate.breaker.breaker")

local reqstate = require("tollgate.request.state")
local reqheaders = require("tollgate.request.headers")
local s3 = require("tollgate.s3")
local identity = require("tollgate.identity")
local deletes = require("tollgate.s3.delete")
local lookup = require("tollgate.config.lookup")


local get_method = ngx.req.get_method
local var = ngx.var
local type = type

local _M = {}

local calculator
local UNVERIFIED = { id = lookup.UNVERIFIED }
local UNVERIFIED_KEYS = shm.keys(lookup.UNVERIFIED)
local DOMAINS           -- TOLLGATE_S3_DOMAINS (nil without: every request is path-style)


--- The cost calculator and the S3 domains of this nginx (tollgate.handler's init).
function _M.configure(calc, domains)
    calculator, DOMAINS = calc, domains
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

function _M.run()
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
            local r = IDENTITY_REFUSALS[why] or identity.REFUSALS[why]
            if r[1] == 503 then
                ngx.header["Retry-After"] = 1   -- lookup_budget_exhausted: the next second's
            end
            return reject_invalid(ctx, why, r[2], r[1])
        end
    end
    local a = config.cached(id)
    if not a then
        if not keys.valid_id(id) then
            return reject_invalid(ctx, "invalid_app_id",
                "app ids must match ^[A-Za-z0-9_-]{1,128}$")
        end
        local aerr
        a, aerr = config.app(id)
        if aerr then
            local r = identity.REFUSALS[aerr]
            ngx.header["Retry-After"] = 1
            return reject_invalid(ctx, aerr, r[2], r[1])
        end
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
        local derr
        nkeys, derr = deletes.read(reqheaders.all(headers), identity.DELETE_MAX)
        if not nkeys then
            local r = identity.REFUSALS[derr]
            return reject_invalid(ctx, derr, r[2], r[1])
        end
    end
    if a == nil then
        -- no config was ever loaded (Redis unreachable since start), or the id could not be
        -- looked up: admit from the one fail-open budget of unverified requests (a made-up id
        -- never gets a budget, an active-set entry or a metric series of its own)
        local ok = l3.fail_open(UNVERIFIED, UNVERIFIED_KEYS, 1)
        ctx.tg_label = "_unconfigured"
        if not ok then
            blocked_event(headers, UNVERIFIED.id, "fail_open_exhausted", "tier", 429)
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
    -- connection limiter: a slot before cost and token bucket; log() gives it back
    -- (docs/design.md §6)
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

return _M
