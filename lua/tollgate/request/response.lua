-- Refusals: every answer the gateway gives instead of the backend goes through REFUSALS, the one
-- table of what each refusal emits — its status, its S3 error code, the metric it counts and the
-- event it reports (docs/design.md, "Refusals"). The body is tollgate's JSON (docs/design.md §5)
-- for requests that named their app by the app header or a variable, and S3's XML error dialect
-- (<Error><Code>SlowDown</Code>...) for every other request — S3 credentials, anonymous requests,
-- and all of them with TOLLGATE_ERROR_FORMAT=s3.
--
-- A refusal is answered before the request body: a request that waits for `100 Continue` gets
-- its answer on a connection that is then closed, so the client never sends the body.
local cjson = require("cjson.safe")
local s3 = require("tollgate.s3")
local identity = require("tollgate.identity")
local reqstate = require("tollgate.request.state")
local reqheaders = require("tollgate.request.headers")
local metrics = require("tollgate.metrics")
local events = require("tollgate.events")

local header = ngx.header
local exit = ngx.exit
local say = ngx.print
local var = ngx.var
local ceil = math.ceil
local now = ngx.now
local type = type
local tonumber = tonumber
local pairs = pairs
local tostring = tostring
local concat = table.concat
local lower = string.lower

local _M = {}

-- What each refusal emits, by tollgate's reason (X-Tollgate-Reason):
--   status  the JSON answer's status (throttles: 429)
--   s3      S3 error code; s3s its status when it differs (throttles: TOLLGATE_S3_THROTTLE_STATUS)
--   metric  counted in ratelimit_rejected_total{app_id,reason} (false: counted by its own module,
--           or before any app is known)
--   event   rule_type of the request_blocked event (false: none)
--   throttle  a rate limit: SlowDown with Retry-After / x-amz-retry-after
local REFUSALS = {
    -- who pays: refused before any app is charged
    missing_app_id = { status = 400, s3 = "AccessDenied", s3s = 403 },
    duplicate_app_id = { status = 400, s3 = "InvalidRequest" },
    invalid_app_id = { status = 400, s3 = "InvalidRequest" },
    invalid_access_key = { status = 403, s3 = "InvalidAccessKeyId" },
    unknown_access_key = { status = 403, s3 = "InvalidAccessKeyId" },
    unknown_app = { status = 403, s3 = "AccessDenied" },
    app_disabled = { status = 403, s3 = "AccessDenied" },
    -- the request itself
    unsupported_method = { status = 405, s3 = "MethodNotAllowed" },
    invalid_request = { status = 400, s3 = "InvalidRequest" },
    entity_too_large = { status = 413, s3 = "EntityTooLarge" },
    missing_content_length = { status = 411, s3 = "MissingContentLength",
        msg = "You must provide the Content-Length HTTP header." },
    duplicate_header = { status = 400, s3 = "InvalidRequest" },
    -- credentials and bodies read as the backend reads them (tollgate.identity, tollgate.s3.delete)
    ambiguous_credentials = { status = 400, s3 = "InvalidArgument",
        msg = "Only one auth mechanism allowed; only one access key id may be given, in one "
            .. "parameter, header or form field" },
    malformed_credentials = { status = 400, s3 = "AuthorizationHeaderMalformed",
        msg = "The authorization header or query parameters are malformed." },
    post_fields_too_large = { status = 400, s3 = "MaxPostPreDataLengthExceeded",
        msg = "Your POST request fields preceding the upload file were too large." },
    malformed_xml = { status = 400, s3 = "MalformedXML", msg = "The XML you provided was not "
        .. "well-formed or did not validate against our published schema." },
    message_too_long = { status = 400, s3 = "MaxMessageLengthExceeded",
        msg = "Your request was too big." },
    -- an id a full config_dict does not hold, the node's lookups of the second spent
    lookup_budget_exhausted = { status = 503, s3 = "SlowDown" },
    -- signature verification (tollgate.s3.sigverify): msg is S3's message for the code
    signature_mismatch = { status = 403, s3 = "SignatureDoesNotMatch",
        msg = "The request signature we calculated does not match the signature you provided. "
            .. "Check your key and signing method." },
    request_expired = { status = 403, s3 = "AccessDenied", msg = "Request has expired" },
    request_not_yet_valid = { status = 403, s3 = "AccessDenied", msg = "Request is not valid yet" },
    time_skewed = { status = 403, s3 = "RequestTimeTooSkewed",
        msg = "The difference between the request time and the current time is too large." },
    missing_date = { status = 403, s3 = "AccessDenied",
        msg = "AWS authentication requires a valid Date or x-amz-date header" },
    authorization_malformed = { status = 400, s3 = "AuthorizationHeaderMalformed",
        msg = "The authorization header is malformed." },
    presign_malformed = { status = 400, s3 = "AuthorizationQueryParametersError",
        msg = "Query-string authentication requires X-Amz-Algorithm, X-Amz-Credential, "
            .. "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders and X-Amz-Expires, each once." },
    signature_unverifiable = { status = 403, s3 = "AccessDenied" },
    -- the backend's circuit breaker (metrics.blocked counts it per app)
    circuit_open = { status = 503, s3 = "ServiceUnavailable", event = "breaker" },
    -- rate limits
    -- (its event is the rule check's rule_triggered, with the rule: tollgate.rules.check)
    rule_limited = { status = 429, throttle = true, metric = true },
    emergency_blocked = { status = 429, throttle = true, metric = true, event = "tier" },
    fail_open_exhausted = { status = 429, throttle = true, event = "tier" },
    -- connection slots (tollgate.conn.limiter counts them in its own metrics)
    app_limit_exceeded = { status = 429, throttle = true, event = "connection" },
    cluster_limit_exceeded = { status = 429, throttle = true, event = "connection" },
    client_limit_exceeded = { status = 429, throttle = true, event = "connection" },
    -- the budget of forged traffic (tollgate.request.authbudget): SlowDown without a backend trip
    auth_failure_budget = { status = 503, throttle = true, metric = true, event = "auth" },
}
-- any other reason of the lease (app_exhausted, cluster_exhausted, ...): a tier throttle
local TIER = { status = 429, throttle = true, metric = true, event = "tier" }
_M.REFUSALS = REFUSALS

local S3_MESSAGES = {
    AccessDenied = "Access Denied",
    InvalidAccessKeyId = "The AWS Access Key Id you provided does not exist in our records.",
    MethodNotAllowed = "The specified method is not allowed against this resource.",
    EntityTooLarge = "Your proposed upload exceeds the maximum allowed size.",
    ServiceUnavailable = "Please reduce your request rate.",
    SlowDown = "Please reduce your request rate.",
}

local REASON_PHRASES = {
    [400] = "Bad Request", [403] = "Forbidden", [405] = "Method Not Allowed",
    [411] = "Length Required",
    [413] = "Payload Too Large", [429] = "Too Many Requests", [503] = "Service Unavailable",
}

--- The row of REFUSALS for `reason` (the tier row for a reason of the lease it does not list).
function _M.row(reason)
    return REFUSALS[reason] or TIER
end

-- true when the current request is answered in S3's dialect: anything but a request that named
-- its app through the app header or a variable (identity.named_by_header), unless
-- TOLLGATE_ERROR_FORMAT=s3
local function s3_dialect(st)
    if identity.ERROR_S3 then
        return true
    end
    if st == nil then
        return true
    end
    if st.tg_s3 then
        return true
    end
    return not st.tg_named
end

-- request_blocked event of a refusal (the table is built only when sampling keeps it)
local function blocked_event(st, id, reason, rule_type, status, limit, current, rule_id)
    local sampled = events.take("request_blocked", id, rule_id)
    if not sampled then
        return
    end
    local ua = st and reqheaders.all(st.h)["user-agent"]
    events.push({
        event_type = "request_blocked", severity = "warning", app_id = id,
        ip_address = var.remote_addr, user_agent = type(ua) == "string" and ua or nil,
        -- the raw path without the query string (a presigned URL's signature stays out of events)
        endpoint = s3.raw_path(var.request_uri), http_method = ngx.req.get_method(),
        request_id = var.request_id, rule_type = rule_type, rule_id = rule_id,
        limit_value = limit, current_usage = current, action_taken = "blocked",
        response_code = status, reason = reason, access_key_id = st and st.tg_akid or nil,
    }, sampled)
end

-- the metric and the event of a refusal (row: its REFUSALS row; id: the app, when known)
local function emit(st, row, reason, status, opts)
    local id = opts and opts.app_id or st and st.tg_label
    if not id or id == "_invalid" or id == "_unknown" or id == "_unconfigured" then
        return
    end
    if row.metric then
        metrics.inc('ratelimit_rejected_total{app_id="' .. id .. '",reason="' .. reason .. '"}')
    end
    if reason == "circuit_open" then
        metrics.blocked(id)
    end
    if row.event then
        blocked_event(st, id, reason, row.event, status, opts and opts.limit, opts and opts.current,
            opts and opts.rule_id)
    end
end

-- Does the client wait for `100 Continue` before a body nobody has read? Then the answer goes
-- out on the raw connection, which nginx closes after it: nginx itself would send
-- `100 Continue` when it discards the body of an answered request, and a kept-alive connection
-- would read the body the client then does not send as the start of its next request.
local function waits_for_continue()
    local expect = var.http_expect
    if expect == nil or lower(expect) ~= "100-continue" then
        return false
    end
    if ngx.req.get_body_data() ~= nil or ngx.req.get_body_file() ~= nil then
        return false    -- read (DeleteObjects, a browser form): 100 Continue is already sent
    end
    local len = var.content_length
    return (len ~= nil and len ~= "0") or var.http_transfer_encoding ~= nil
end

-- the limiter's headers the location's add_header lines would add (nginx/tollgate_location.conf)
local ADDED = { { "X-RateLimit-Cost", "tg_c" }, { "X-RateLimit-Remaining", "tg_r" } }

-- The answer on the raw connection: status line, the headers set so far, Connection: close.
local function send_raw(status, body)
    ngx.status = status     -- what the log phase and the access log see
    local lines = { "HTTP/1.1 " .. status .. " " .. (REASON_PHRASES[status] or "Error"),
                    "Date: " .. ngx.http_time(ngx.time()) }
    for name, value in pairs(ngx.resp.get_headers(64)) do
        if name ~= "connection" and name ~= "content-length" then
            if type(value) == "table" then
                value = concat(value, ", ")
            end
            lines[#lines + 1] = name .. ": " .. tostring(value)
        end
    end
    -- what the location's add_header lines would add (the header filter does not run here)
    for i = 1, #ADDED do
        local v = var[ADDED[i][2]]
        if v ~= nil and v ~= "" then
            lines[#lines + 1] = ADDED[i][1] .. ": " .. v
        end
    end
    lines[#lines + 1] = "Content-Length: " .. #body
    lines[#lines + 1] = "Connection: close"
    lines[#lines + 1] = ""
    lines[#lines + 1] = body
    local sock, err = ngx.req.socket(true)
    if not sock then
        ngx.log(ngx.WARN, "tollgate: raw answer of a refusal: ", err)
        say(body)
        return exit(status)
    end
    local ok, serr = sock:send(concat(lines, "\r\n"))
    if not ok then
        ngx.log(ngx.INFO, "tollgate: sending a refusal: ", serr)
    end
    return exit(status)
end

local function finish(status, content_type, body)
    header["Content-Type"] = content_type
    header["Cache-Control"] = "no-store"
    if waits_for_continue() then
        return send_raw(status, body)
    end
    ngx.status = status
    say(body)
    return exit(status)
end

local function send_s3(status, code, message, reason, extra)
    header["X-Tollgate-Reason"] = reason
    return finish(status, "application/xml",
        s3.error_xml(code, message or S3_MESSAGES[code] or code, s3.raw_path(var.request_uri),
            var.request_id, extra))
end

-- The answer of refusal `reason` (row: its REFUSALS row), in the request's dialect.
local function send(row, body, extra)
    local st = reqstate.current()
    local reason = body.reason
    local status = row.status
    local s3st
    if s3_dialect(st) then
        local code = row.s3
        if row.throttle then
            code, s3st = "SlowDown", identity.THROTTLE_STATUS
            if body.rule_id then
                header["X-Tollgate-Rule"] = body.rule_id
            end
        else
            s3st = row.s3s or status
            if code == nil then
                code = status == 403 and "AccessDenied" or "InvalidRequest"
            end
        end
        if code == "InvalidAccessKeyId" and st and st.tg_akid then
            extra = { { "AWSAccessKeyId", st.tg_akid } }
        end
        emit(st, row, reason, s3st, body)
        return send_s3(s3st, code, row.msg or S3_MESSAGES[code] or body.message, reason, extra)
    end
    emit(st, row, reason, status, body)
    return finish(status, "application/json", cjson.encode(body))
end

--- 4xx for a request the limiter refuses without tokens involved (identity, method, a bad
-- request). status: the JSON status when the reason is not one of REFUSALS.
function _M.refuse(status, reason, message)
    local row = REFUSALS[reason] or { status = status }
    return send(row, { error = row.status == 403 and "forbidden"
                           or row.status == 503 and "service_unavailable" or "bad_request",
                       reason = reason, message = message })
end

--- 413 for a request whose announced body exceeds `max` bytes (EntityTooLarge in S3's dialect,
-- with S3's ProposedSize and MaxSizeAllowed).
function _M.too_large(size, max)
    local row = REFUSALS.entity_too_large
    local body = { error = "payload_too_large", reason = "entity_too_large",
                   message = "the request body of " .. size .. " bytes exceeds the limit of "
                       .. max .. " bytes", size = size, max = max }
    return send(row, body, { { "ProposedSize", size }, { "MaxSizeAllowed", max } })
end

-- Retry-After in whole seconds (ceil, at least 1) and x-amz-retry-after in milliseconds (at
-- least 1) of a wait of `secs` seconds (fractional).
local function retry_headers(secs)
    secs = tonumber(secs) or 1
    if secs < 0.001 then
        secs = 0.001
    end
    local whole, ms = ceil(secs), ceil(secs * 1000)
    header["Retry-After"] = whole
    header["x-amz-retry-after"] = ms
    return whole, ms
end
_M.retry_headers = retry_headers

--- 503 for a request an open circuit breaker refuses (never charged). retry_after: seconds.
function _M.unavailable(backend, retry_after)
    local whole = retry_headers(retry_after)
    return send(REFUSALS.circuit_open, { error = "service_unavailable", reason = "circuit_open",
                                         backend = backend, retry_after = whole })
end

--- 429 (SlowDown in S3's dialect) for a request over a limit.
-- cost: the request's price (X-RateLimit-Cost: the same meaning as on admitted answers).
-- retry_after: seconds until the request can pass (fractional; Retry-After is its ceiling, at
-- least 1, and x-amz-retry-after the milliseconds). info: {reset, remaining, limit, current}
-- (limit/current: the request_blocked event's limit_value/current_usage). policy: {quota,
-- window} in cost units for the IETF RateLimit-Policy header (optional). rule_id: the rule that
-- refused the request (reason rule_limited).
function _M.too_many(reason, cost, retry_after, info, policy, rule_id)
    local remaining = info.remaining or 0
    if remaining < 0 then
        remaining = 0
    end
    local whole, ms = retry_headers(retry_after)
    local reset = ceil(info.reset or (now() + whole))
    header["X-RateLimit-Cost"] = cost
    header["X-RateLimit-Remaining"] = remaining
    header["X-RateLimit-Reset"] = reset
    if policy then
        header["RateLimit-Policy"] = '"tollgate";q=' .. policy.quota .. ';w=' .. policy.window
        header["RateLimit"] = '"tollgate";r=' .. remaining .. ';t=' .. whole
    end
    return send(REFUSALS[reason] or TIER, {
        error = "rate_limit_exceeded",
        reason = reason,
        retry_after = whole,
        retry_after_ms = ms,
        remaining = remaining,
        cost = cost,
        rule_id = rule_id,
        limit = info.limit,
        current = info.current,
        app_id = info.app_id,
    })
end

return _M
