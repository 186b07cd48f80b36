-- Rejections: the JSON body and headers of DESIGN §5 (seed 000 "HTTP 响应格式").
local cjson = require("cjson.safe")

local header = ngx.header
local exit = ngx.exit
local say = ngx.print
local ceil = math.ceil
local now = ngx.now

local _M = {}

local function send(status, body)
    ngx.status = status
    header["Content-Type"] = "application/json"
    header["Cache-Control"] = "no-store"
    say(cjson.encode(body))
    return exit(status)
end

--- 400/403/405 for a request the limiter refuses to classify (no tokens involved).
function _M.refuse(status, reason, message)
    return send(status, { error = status == 403 and "forbidden" or "bad_request",
                          reason = reason, message = message })
end

--- 503 for a request an open circuit breaker refuses (never charged).
function _M.unavailable(backend, retry_after)
    header["Retry-After"] = retry_after
    return send(503, { error = "service_unavailable", reason = "circuit_open", backend = backend,
                       retry_after = retry_after })
end

--- 429 for a request over its limit. info: {reset, remaining, retry_after}
-- policy: {quota, window} in cost units for the IETF RateLimit-Policy header (optional).
-- rule_id: the rule that refused the request (reason rule_limited).
function _M.too_many(reason, cost, retry_after, info, policy, rule_id)
    local remaining = info.remaining or 0
    if remaining < 0 then
        remaining = 0
    end
    local reset = ceil(info.reset or (now() + retry_after))
    header["Retry-After"] = retry_after
    header["X-RateLimit-Cost"] = cost
    header["X-RateLimit-Remaining"] = remaining
    header["X-RateLimit-Reset"] = reset
    if policy then
        header["RateLimit-Policy"] = '"tollgate";q=' .. policy.quota .. ';w=' .. policy.window
        header["RateLimit"] = '"tollgate";r=' .. remaining .. ';t=' .. retry_after
    end
    return send(429, {
        error = "rate_limit_exceeded",
        reason = reason,
        retry_after = retry_after,
        remaining = remaining,
        cost = cost,
        rule_id = rule_id,
    })
end

return _M
