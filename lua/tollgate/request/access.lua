-- The access phase (access_by_lua): identify the app, classify and price the request, take a
-- connection slot, check the rules, acquire the cost from the lease (L3) — or refuse with a 4xx
-- in the dialect the client speaks. tollgate.handler wires it as access().
local cfgcache = require("tollgate.config.cache")
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
local breaker = require("tollgate.breaker.breaker")

local reqstate = require("tollgate.request.state")
local reqheaders = require("tollgate.request.headers")
local s3 = require("tollgate.s3")
local identity = require("tollgate.identity")
local sigverify = require("tollgate.s3.sigverify")
local authbudget = require("tollgate.request.authbudget")
local deletes = require("tollgate.s3.delete")
local lookup = require("tollgate.config.lookup")
local pace = require("tollgate.request.pace")
local DOWNLOAD = require("tollgate.cost").DOWNLOAD


local get_method = ngx.req.get_method
local var = ngx.var
local header = ngx.header
local tonumber = tonumber

local _M = {}

local calculator
local UNVERIFIED = { id = lookup.UNVERIFIED }
local UNVERIFIED_KEYS = shm.keys(lookup.UNVERIFIED)
local DOMAINS           -- TOLLGATE_S3_DOMAINS (nil without: every request is path-style)
local MAX_BODY = 5368709120     -- TOLLGATE_MAX_BODY_SIZE: S3's single-PUT limit, 5 GiB


--- The cost calculator, the S3 domains and the settings of this nginx (tollgate.handler's
-- init).
function _M.configure(calc, domains, settings)
    calculator, DOMAINS = calc, domains
    if settings and settings.max_body_size then
        MAX_BODY = settings.max_body_size
    end
end

local function reject_invalid(ctx, reason, message, status)
    ctx.tg_label = "_invalid"
    return response.refuse(status or 400, reason, message)
end

-- Messages of identity refusals (reason -> message; status and S3 code: response.REFUSALS)
local IDENTITY_REFUSALS = {
    missing_app_id = "no S3 credentials, no app header and no owner of the bucket",
    duplicate_app_id = "send exactly one app header",
    invalid_access_key = "the access key id is malformed",
    unknown_access_key = "the access key id is not known to the gateway",
}

-- The size an upload announces: the object's (aws-chunked: x-amz-decoded-content-length), else
-- Content-Length; nil when it announces none.
local function announced_size(headers)
    local n = tonumber(headers["x-amz-decoded-content-length"])
    if n then
        return n
    end
    return tonumber(headers["content-length"])
end

function _M.run()
    local ctx = reqstate.open()
    local headers = reqheaders.read(ctx.h)
    local method = get_method()
    local q = reqheaders.query()
    -- the request target as the client sent it, which is what the backend parses: $uri is
    -- nginx's normalised path (dot-segments resolved, %XX decoded)
    local path = s3.raw_path(var.request_uri, q ~= nil)
    local vbucket = DOMAINS and s3.vhost_bucket(headers.host, DOMAINS) or nil
    local op = s3.operation(method, s3.level(vbucket, path), q, headers["x-amz-copy-source"] ~= nil)
    if not cfgcache.current() then
        cfgcache.refresh()            -- the access key and bucket maps of the current config
    end
    local id, why, akid = identity.identify(ctx, headers, q, op, vbucket, path)
    if id then
        akid, why = why, nil
    end
    ctx.tg_akid = akid or false
    if not id then
        if why == "unknown_access_key" and cfgcache.version() == nil then
            id = "_s3"      -- no config was ever loaded: fail-open below, one budget for keys
        else
            -- (a reason REFUSALS does not list is a 400: InvalidRequest in S3's dialect)
            local row = response.REFUSALS[why]
            local known = identity.REFUSALS[why]
            if why == "lookup_budget_exhausted" then
                header["Retry-After"] = 1   -- the next second's lookups
            end
            return reject_invalid(ctx, why, IDENTITY_REFUSALS[why] or known and known[2] or why,
                row and row.status or 400)
        end
    end
    if akid then    -- a key with a secret on file: its signature, before anything is taken
        local sok, sreason = sigverify.check(akid, headers, method, vbucket)
        if not sok then
            local r = sigverify.REFUSALS[sreason]
            return reject_invalid(ctx, sreason, r[2], r[1])
        end
    end
    local a = cfgcache.cached(id)
    if not a then
        if not keys.valid_id(id) then
            return reject_invalid(ctx, "invalid_app_id",
                "app ids must match ^[A-Za-z0-9_-]{1,128}$")
        end
        local aerr
        a, aerr = cfgcache.app(id)
        if aerr then    -- lookup_budget_exhausted: the node's lookups of this second are spent
            header["Retry-After"] = 1
            return reject_invalid(ctx, aerr, identity.REFUSALS[aerr][2])
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
    local size = announced_size(headers)
    if size and size > MAX_BODY then
        ctx.tg_label = "_invalid"
        return response.too_large(size, MAX_BODY)
    end
    -- an S3 upload of no announced size: S3's 411, before the body (nginx would stream it to a
    -- backend that refused it already)
    if not ctx.tg_named and s3.length_required(op, headers) then
        return reject_invalid(ctx, "missing_content_length",
            "an upload needs Content-Length or x-amz-decoded-content-length", 411)
    end
    if a == nil then
        -- no config was ever loaded (Redis unreachable since start): admit from fail-open
        -- (or the id could not be looked up): the one fail-open budget of unverified requests (a
        -- made-up id never gets a budget, an active-set entry or a metric series of its own)
        local ok, _, info = l3.fail_open(UNVERIFIED, UNVERIFIED_KEYS, 1)
        ctx.tg_label = "_unconfigured"
        if not ok then
            info.app_id = UNVERIFIED.id
            return response.too_many("fail_open_exhausted", 1, info.retry_after, info)
        end
        return
    end
    ctx.tg_label = id
    if not a.enabled then
        return response.refuse(403, "app_disabled", "the app is disabled")
    end
    -- the budget of forged traffic: an address (or a key from it) whose requests the backend
    -- refused as unauthenticated too often is refused here until its window passes
    local wait, failures = authbudget.spent(headers, akid)
    if wait then
        metrics.inc('ratelimit_auth_failures_total{app_id="' .. id .. '"}')
        return response.too_many("auth_failure_budget", 0, wait,
            { reset = ngx.now() + wait, remaining = 0, current = failures })
    end
    -- circuit breaker of the location's backend: refused before anything is charged (and
    -- before a body is read)
    local bok, backend, bretry = breaker.check(id, ctx)
    if not bok then
        header["X-RateLimit-Cost"] = (calculator:price(a, op, headers, nil))
        return response.unavailable(backend, bretry)
    end
    -- connection limiter: a slot before cost and token bucket; log() gives it back
    -- (docs/design.md §6)
    local cok, creason, climit, ccurrent = connlimit.acquire(a, ctx, headers)
    if not cok then
        return response.too_many(creason, (calculator:price(a, op, headers, nil)), 1,
            { remaining = 0, limit = climit, current = ccurrent })
    end
    local nkeys
    if op == "DeleteObjects" then
        -- the one body read before admission (bounded, counted as the backend counts it)
        local derr
        nkeys, derr = deletes.read(reqheaders.all(headers), identity.DELETE_MAX)
        if not nkeys then
            return response.refuse(400, derr, identity.REFUSALS[derr][2])
        end
    end

    local cost, estimate, reserve, chunked = calculator:price(a, op, headers, nkeys)
    -- an upload's body must arrive at a minimum rate: its deadline frees the slot of a trickle
    local body = chunked and calculator:upload_estimate(headers)
        or tonumber(headers["content-length"])
    if body and body > 0 then
        connlimit.body_deadline(ctx, body, op)
    end
    -- rules after the connection slot and the price, before the tiers: a rule rejection
    -- charges no tier tokens, and log() gives the slot back
    local rule, rretry, rremaining, dup = rules.check(a, method, headers, cost)
    if rule then
        if dup then
            return response.refuse(400, "duplicate_header", "send exactly one " .. dup
                .. " header: rule " .. rule.id .. " counts requests by it")
        end
        return response.too_many("rule_limited", cost, rretry,
            { reset = ngx.now() + rretry, remaining = rremaining }, nil, rule.id)
    end
    local em = emergency.blocked(a)
    if em then
        local info = { reset = em, remaining = 0, current = cost }
        return response.too_many("emergency_blocked", cost, l3.retry_after(info), info)
    end
    local covered = 0
    local uri
    if op == "UploadPart" or reserve > 0 then
        uri = var.uri   -- the reservation of a multipart upload: the key log() finds it by
    end
    if op == "UploadPart" then
        covered = reservation.draw(a, uri, cost - calculator.base[op])
    end
    -- up front at most what the app can ever hold (its burst): a costlier request is admitted
    -- when the bucket is full and the rest is charged as the bytes move (log phase), as debt
    -- the refill repays first
    local upfront, deferred = cost + estimate - covered, 0
    if upfront > a.burst and a.burst > 0 then
        upfront, deferred, reserve = a.burst, upfront - a.burst, 0
    elseif upfront + reserve > a.burst and a.burst > 0 then
        reserve = a.burst - upfront
    end
    local charge = upfront + reserve
    local ok, x, y = l3.acquire(a, charge)
    ctx.tg_method = method
    if not ok then
        reservation.undraw(a, uri, covered)
        if x == "app_disabled" then
            return response.refuse(403, x, "the app is disabled")
        end
        y.limit, y.current = a.guaranteed, charge
        return response.too_many(x, cost, l3.retry_after(y), y,
            { quota = a.guaranteed, window = 1 })
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
    ctx.tg_deferred = deferred
    if DOWNLOAD[op] and pace.enabled() then
        -- charged as its bytes leave, paced when the lease cannot pay (body filter)
        pace.follow(ctx, estimate - deferred)
    end
    -- an upload of a known length: the header bytes read so far, so that the log phase can
    -- charge only the body bytes that really arrived if the request fails
    ctx.tg_head = not chunked and nkeys == nil and headers["content-length"] ~= nil
        and tonumber(var.request_length) or false
    -- emitted by the add_header lines of nginx/tollgate_location.conf: the request's price
    -- (the same number a refusal's X-RateLimit-Cost carries) and the tokens left
    numvar.set("tg_c", cost)
    numvar.set("tg_r", x)
end

return _M
