-- The log phase (log_by_lua): post-hoc charges (download bandwidth, chunked uploads), the
-- rollback of cancelled requests and of requests the backend refused as unauthenticated, the
-- connection slot's release, reservations and the request metrics. tollgate.handler wires it as
-- log().
local cost_mod = require("tollgate.cost")
local metrics = require("tollgate.metrics")
local l3 = require("tollgate.lease.bucket")
local connlimit = require("tollgate.conn.limiter")
local reservation = require("tollgate.lease.reservation")
local events = require("tollgate.events")
local breaker = require("tollgate.breaker.breaker")

local reqstate = require("tollgate.request.state")
local reqheaders = require("tollgate.request.headers")
local authbudget = require("tollgate.request.authbudget")
local numvar = require("tollgate.request.numvar")
local pace = require("tollgate.request.pace")


local get_method = ngx.req.get_method
local var = ngx.var
local type = type
local tonumber = tonumber
local find = string.find

local _M = {}

local calculator

local KNOWN_METHODS = { GET = true, HEAD = true, PUT = true, POST = true, DELETE = true,
                        PATCH = true, OPTIONS = true }

--- Settings and the cost calculator of this nginx (tollgate.handler's init).
function _M.configure(settings, calc)
    calculator = calc
    authbudget.configure(settings)
end

-- $tg_s, the settled cost, for access logs (docs/s3.md): written while something in the
-- configuration names the variable (a log_format). nginx refuses to set a variable nothing
-- names (nothing could read it); after its first refusal this worker stops trying, and a
-- gateway whose access log does not use it pays for no variable write.
local settled_named = true

local function set_settled(n)
    if settled_named and not numvar.try_set("tg_s", n) then
        settled_named = false
    end
end

-- Did the upstream answer anything? ($upstream_bytes_received: "0", "0, 153", nil w/o upstream)
local function upstream_answered()
    local b = var.upstream_bytes_received
    return b ~= nil and find(b, "[1-9]") ~= nil
end

-- A request the backend refused as unauthenticated, refunded: counted by app (a bounded label),
-- per client address and per (key, address) for the budget of forged traffic
-- (tollgate.request.authbudget: never a label), and an event carrying the address, its count
-- and the access key id.
local function auth_failed(ctx, label, method, status)
    metrics.inc('ratelimit_auth_failures_total{app_id="' .. label .. '"}')
    local headers = reqheaders.all(ctx.h)
    local n, ip = authbudget.failed(headers, ctx.tg_akid)
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

-- Bytes a request of app `a` sent to its client.
local function bytes_out(a, n)
    metrics.inc(metrics.bytes_series(a, "out"), n)
end

-- Bytes of the body a request of app `a` sent to the backend.
local function bytes_in(a, n)
    metrics.inc(metrics.bytes_series(a, "in"), n)
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
    -- what a download paid while its bytes moved (tollgate.request.pace)
    local flow = ctx.tg_pace and pace.close(ctx) or 0
    -- cancelled: nothing reached the backend's answer — the client went away (499), nginx
    -- refused the request or its body (400, 408, 413) or the backend failed (5xx); refunded
    -- whatever the status
    local cancelled = status >= 400 and not upstream_answered()
    -- the backend refused the request as unauthenticated (forged or unknown credentials)
    local denied = (status == 401 or status == 403) and upstream_answered()
    if cancelled or denied then
        l3.rollback(a, ctx.tg_cost, ctx.tg_source)
        if flow > 0 then
            l3.refund(a, flow, ctx.tg_source)
        end
        reservation.undraw(a, var.uri, ctx.tg_covered)
        if ctx.tg_reserve > 0 then
            reservation.close(a, var.uri)
        end
        metrics.request(label, method, status, nil)
        set_settled(0)              -- $tg_s: the settled cost (refunded)
        if denied then
            metrics.operation(op, 0)
            auth_failed(ctx, label, method, status)
        end
        return
    end
    local actual = 0
    if ctx.tg_chunked then
        -- nginx sets $content_length to the de-chunked size once it has read the body
        local got = tonumber(var.content_length) or 0
        actual = calculator:bandwidth(got, a.c_bw, ctx.tg_total)
        if got > 0 then
            bytes_in(a, got)
        end
    elseif cost_mod.DOWNLOAD[op] then
        local sent = tonumber(var.body_bytes_sent) or 0
        actual = calculator:bandwidth(sent, a.c_bw, ctx.tg_total)
        cost_mod.observe_download(a, sent)
        local counted = ctx.tg_bcount   -- bytes the body filter counted as they left
        if counted then
            sent = sent - counted
        end
        if sent > 0 then
            bytes_out(a, sent)
        end
    end
    -- a failed upload of a known length pays only for the body bytes that arrived
    local short = 0
    local head = ctx.tg_head
    if head then
        -- the announced length (the header the access phase read; no variable read): the
        -- backend answered, so the body was in
        local len = tonumber(ctx.h["content-length"]) or 0
        if status >= 400 then
            len = tonumber(var.content_length) or 0
            local got = (tonumber(var.request_length) or 0) - head
            if got < len then
                short = ctx.tg_total - calculator:calculate(op, got > 0 and got or 0, a.c_bw)
                len = got > 0 and got or 0
            end
        end
        if len > 0 then
            bytes_in(a, len)
        end
    end
    -- settle: refund an estimate above what moved, charge what moved beyond it and the part of
    -- the price the admission deferred (local debt when the lease cannot cover it)
    local deferred = ctx.tg_deferred
    if ctx.tg_estimate > 0 or actual > 0 or deferred > 0 or short > 0 or flow > 0 then
        reservation.settle(a, ctx.tg_estimate + flow + short, actual + deferred, ctx.tg_source)
    end
    actual = actual - short
    if (op == "CreateMultipartUpload" and ctx.tg_reserve > 0 and status >= 300)
            or ((op == "CompleteMultipartUpload" or op == "AbortMultipartUpload")
                and status < 300) then
        reservation.close(a, var.uri)
    end
    metrics.request(label, method, status, ctx.tg_total + actual)
    metrics.operation(op, ctx.tg_total + actual)
    set_settled(ctx.tg_total + actual)   -- $tg_s: the settled cost, for the access log
end

function _M.run()
    local ctx = reqstate.take()     -- nil when access() did not run for this request
    if ctx then
        log_request(ctx)
        reqstate.release(ctx)
    end
end

return _M
