-- Rejections: the JSON body and headers of docs/design.md §5, or S3's XML
-- error dialect for requests that carry S3 credentials (every request with
-- TOLLGATE_ERROR_FORMAT=s3): <Error><Code>SlowDown</Code>... with X-Tollgate-Reason.
local cjson = require("cjson.safe")
local s3 = require("tollgate.s3")
local identity = require("tollgate.identity")
local reqstate = require("tollgate.request.state")

local header = ngx.header
local exit = ngx.exit
local say = ngx.print
local ceil = math.ceil
local now = ngx.now

local _M = {}

-- S3 codes of tollgate's refusal reasons other than throttling (status, code, message)
local S3_CODES = {
    app_disabled = { 403, "AccessDenied", "Access Denied" },
    unknown_app = { 403, "AccessDenied", "Access Denied" },
    missing_app_id = { 403, "AccessDenied", "Access Denied" },
    invalid_access_key = { 403, "InvalidAccessKeyId",
        "The AWS Access Key Id you provided does not exist in our records." },
    unknown_access_key = { 403, "InvalidAccessKeyId",
        "The AWS Access Key Id you provided does not exist in our records." },
    unsupported_method = { 405, "MethodNotAllowed",
        "The specified method is not allowed against this resource." },
    circuit_open = { 503, "ServiceUnavailable", "Please reduce your request rate." },
}
local SLOWDOWN = "Please reduce your request rate."

-- true when the current request is answered in S3's dialect
local function s3_dialect()
    if identity.ERROR_S3 then
        return true
    end
    local st = reqstate.current()
    return st ~= nil and st.tg_s3 == true
end

local function send_s3(status, code, message, reason, extra)
    ngx.status = status
    header["Content-Type"] = "application/xml"
    header["Cache-Control"] = "no-store"
    header["X-Tollgate-Reason"] = reason
    say(s3.error_xml(code, message, ngx.var.uri, ngx.var.request_id, extra))
    return exit(status)
end

local function send(status, body)
    if s3_dialect() then
        local c = S3_CODES[body.reason] or identity.S3_CODES[body.reason]
        if c then
            local extra
            if c[2] == "InvalidAccessKeyId" then
                local st = reqstate.current()
                if st and st.tg_akid then
                    extra = { { "AWSAccessKeyId", st.tg_akid } }
                end
            end
            return send_s3(c[1], c[2], c[3], body.reason, extra)
        end
        if status == 429 then
            if body.rule_id then
                header["X-Tollgate-Rule"] = body.rule_id
            end
            return send_s3(identity.THROTTLE_STATUS, "SlowDown", SLOWDOWN, body.reason)
        end
        return send_s3(status, status == 403 and "AccessDenied" or "InvalidArgument",
            body.message or body.reason, body.reason)
    end
    ngx.status = status
    header["Content-Type"] = "application/json"
    header["Cache-Control"] = "no-store"
    say(cjson.encode(body))
    return exit(status)
end

--- 400/403/405 for a request the limiter refuses to classify (no tokens involved).
function _M.refuse(status, reason, message)
    return send(status, { error = status == 403 and "forbidden"
                              or status == 503 and "service_unavailable" or "bad_request",
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
