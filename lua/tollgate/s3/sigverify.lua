-- Signature verification in the access phase, for access keys with a secret on file
-- (tollgate.s3.sigsecrets): SigV4 (Authorization header, presigned query, the seed signature
-- of a streaming upload), SigV2 (header and presigned query) and the policy signature of browser
-- POST uploads, with the time checks S3 makes
-- (a presigned URL's expiry, a signed date at most 15 minutes from the gateway's clock). A
-- request it refuses is answered before it takes tokens or a connection slot or reaches the
-- backend. Keys without a secret are left to the backend, as before.
local crypto = require("tollgate.s3.sigcrypto")
local v4 = require("tollgate.s3.sigv4")
local v2 = require("tollgate.s3.sigv2")
local secrets = require("tollgate.s3.sigsecrets")
local reqheaders = require("tollgate.request.headers")
local s3 = require("tollgate.s3")

local sub = string.sub
local find = string.find
local type = type
local tonumber = tonumber
local var = ngx.var
local now = ngx.now
local abs = math.abs
local os_date = os.date

local _M = {}

local hex = crypto.hex
local hmac_prepared = crypto.hmac_prepared

-- the signing key of (secret, date, region, service), prepared for HMAC
local function derive(secret, date, region, service)
    return crypto.hmac_prepare(v4.signing_key(secret, date, region, service))
end

local SKEW = 900                -- seconds a signed date may be from the gateway's clock (S3's)

-- refusals: reason -> status, message (the S3 code is tollgate.request.response's)
_M.REFUSALS = {
    signature_mismatch = { 403, "The request signature we calculated does not match the "
        .. "signature you provided. Check your key and signing method." },
    request_expired = { 403, "Request has expired" },
    request_not_yet_valid = { 403, "Request is not valid yet" },
    time_skewed = { 403, "The difference between the request time and the current time is too "
        .. "large." },
    missing_date = { 403, "AWS authentication requires a valid Date or x-amz-date header" },
    authorization_malformed = { 400, "The authorization header is malformed." },
    presign_malformed = { 400, "Query-string authentication requires the X-Amz-Algorithm, "
        .. "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders and X-Amz-Expires "
        .. "parameters, each once, X-Amz-Expires at most 604800." },
    signature_unverifiable = { 403, "This access key's signatures are verified by the gateway, "
        .. "which cannot verify this request (the secret cannot be opened, or the signing method "
        .. "is not one it checks)." },
}

-- the raw path and query of the request target, as sent
local function target()
    local uri = var.request_uri or "/"
    local q = find(uri, "?", 1, true)
    if q then
        return sub(uri, 1, q - 1), sub(uri, q + 1)
    end
    return uri, ""
end

-- the value of decoded parameter `name` in params ps: the value, or nil; false when repeated
local function param(ps, name)
    local v
    for i = 1, #ps do
        if ps[i][1] == name then
            if v ~= nil then
                return false
            end
            v = ps[i][2]
        end
    end
    return v
end

local function num(v)
    return type(v) == "string" and tonumber(v) or nil
end

local function one(h)
    if type(h) == "table" then
        return nil
    end
    return h
end

local function skewed(t)
    return abs(now() - t) > SKEW
end

-- SigV4 over the canonical request; true or nil, reason
local function check_v4(e, akid, c, method, path, ps, skip, headers, amz_date, payload)
    if c.akid ~= akid then
        return nil, "signature_mismatch"
    end
    local ch = v4.canonical_headers(c.signed, headers)
    if not ch or not find(";" .. c.signed .. ";", ";host;", 1, true) then
        return nil, "signature_mismatch"
    end
    local creq = v4.canonical_request(method, v4.canonical_uri(path),
        v4.canonical_query(ps, skip), ch, c.signed, payload)
    local sts = v4.string_to_sign(amz_date, c.scope, creq)
    local skey = secrets.signing_key(e, c.scope, c.date, c.region, c.service, derive)
    if hex(hmac_prepared(skey, sts)) ~= c.signature then
        return nil, "signature_mismatch"
    end
    return true
end

local function v4_header(e, akid, auth, method, headers, path, q)
    local c = v4.parse_header(auth)
    if not c then
        return nil, "authorization_malformed"
    end
    local amz_date = one(headers["x-amz-date"])
    local t
    if amz_date then
        t = v4.parse_amz_date(amz_date)
    else
        local d = one(headers.date)
        t = d and v4.parse_http_date(d)
        amz_date = t and os_date("!%Y%m%dT%H%M%SZ", t)
    end
    if not t then
        return nil, "missing_date"
    end
    if sub(amz_date, 1, 8) ~= c.date then
        return nil, "authorization_malformed"
    end
    if skewed(t) then
        return nil, "time_skewed"
    end
    local payload = headers["x-amz-content-sha256"]
    if payload == nil then
        payload = v4.EMPTY_SHA256
    elseif type(payload) ~= "string" then
        return nil, "signature_mismatch"
    end
    return check_v4(e, akid, c, method, path, v4.params(q), nil, headers, amz_date, payload)
end

local function v4_presigned(e, akid, method, headers, path, ps)
    local alg = param(ps, "X-Amz-Algorithm")
    local c = v4.credential(param(ps, "X-Amz-Credential"))
    local amz_date = param(ps, "X-Amz-Date")
    local expires = num(param(ps, "X-Amz-Expires"))
    local signed = param(ps, "X-Amz-SignedHeaders")
    local sig = param(ps, "X-Amz-Signature")
    local t = v4.parse_amz_date(amz_date)
    if alg ~= v4.ALGORITHM or not c or not t or not signed or not sig or not expires
            or expires < 1 or expires > v4.MAX_EXPIRES or expires % 1 ~= 0
            or sub(amz_date, 1, 8) ~= c.date or #sig ~= 64 then
        return nil, "presign_malformed"
    end
    local at = now()
    if at < t - SKEW then
        return nil, "request_not_yet_valid"
    end
    if at > t + expires then
        return nil, "request_expired"
    end
    c.signed, c.signature = signed, sig:lower()
    local payload = param(ps, "X-Amz-Content-Sha256")
    if payload == nil then
        payload = headers["x-amz-content-sha256"]
    end
    if payload == nil then
        payload = v4.UNSIGNED
    elseif type(payload) ~= "string" then
        return nil, "signature_mismatch"
    end
    return check_v4(e, akid, c, method, path, ps, "X-Amz-Signature", headers, amz_date, payload)
end

local function v2_header(e, akid, auth, method, headers, path, q, vbucket)
    local id, sig = v2.parse_header(auth)
    if not id then
        return nil, "authorization_malformed"
    end
    if id ~= akid then
        return nil, "signature_mismatch"
    end
    local amz = one(headers["x-amz-date"])
    local date = one(headers.date)
    local t = v4.parse_http_date(amz or date)
    if not t then
        return nil, "missing_date"
    end
    if skewed(t) then
        return nil, "time_skewed"
    end
    local sts = v2.string_to_sign(method, headers, path, v4.params(q), vbucket, amz and "" or date)
    if v2.signature(e.secret, sts) ~= sig then
        return nil, "signature_mismatch"
    end
    return true
end

local function v2_presigned(e, akid, method, headers, path, ps, vbucket)
    local id = param(ps, "AWSAccessKeyId")
    local expires = param(ps, "Expires")
    local sig = param(ps, "Signature")
    local exp = num(expires)
    if not id or not sig or not exp or exp % 1 ~= 0 or not expires:match("^%d+$") then
        return nil, "presign_malformed"
    end
    if id ~= akid then
        return nil, "signature_mismatch"
    end
    if now() > exp then
        return nil, "request_expired"
    end
    local sts = v2.string_to_sign(method, headers, path, ps, vbucket, expires)
    if v2.signature(e.secret, sts) ~= sig then
        return nil, "signature_mismatch"
    end
    return true
end

-- the form fields a browser POST upload signs with (lower-case names)
local FORM_FIELDS = { policy = true, ["x-amz-signature"] = true, ["x-amz-credential"] = true,
                      ["x-amz-algorithm"] = true, awsaccesskeyid = true, signature = true }
local FORM_MAX = 65536      -- bytes of the form read for them (as tollgate.identity reads it)

-- The signing fields of a multipart/form-data body (those before the file, as S3 reads them):
-- { name = value }, or nil when one is repeated or the form cannot be read.
local function form_fields(headers)
    local boundary = s3.form_boundary(headers["content-type"])
    if not boundary then
        return nil
    end
    ngx.req.read_body()         -- (tollgate.identity read it already for the credential)
    local body = ngx.req.get_body_data()
    if not body then
        local p = ngx.req.get_body_file()
        local f = p and io.open(p, "rb")
        if not f then
            return nil
        end
        body = f:read(FORM_MAX)
        f:close()
    end
    if not body then
        return nil
    end
    local out, delim, pos = {}, "--" .. boundary, 1
    while true do
        local b, e = find(body, delim, pos, true)
        if not b then
            return out
        end
        local hend = find(body, "\r\n\r\n", e, true)
        if not hend then
            return out
        end
        local name = string.lower(sub(body, e + 1, hend)):match('name="([^"]*)"')
        local vend = find(body, "\r\n" .. delim, hend + 4, true)
        if name == "file" or not vend then
            return out
        end
        if FORM_FIELDS[name] then
            if out[name] ~= nil then
                return nil
            end
            out[name] = sub(body, hend + 4, vend - 1)
        end
        pos = vend + 2
    end
end

-- A browser POST upload: the policy's signature (V4: hex HMAC-SHA256 under the signing key of
-- X-Amz-Credential; V2: base64 HMAC-SHA1 under the secret). The policy's conditions and its
-- expiration are the backend's to check.
local function post_form(e, akid, headers)
    local f = form_fields(headers)
    if not f or not f.policy then
        return nil, "signature_unverifiable"
    end
    if f["x-amz-signature"] then
        local c = v4.credential(f["x-amz-credential"])
        if f["x-amz-algorithm"] ~= v4.ALGORITHM or not c then
            return nil, "authorization_malformed"
        end
        if c.akid ~= akid then
            return nil, "signature_mismatch"
        end
        local skey = secrets.signing_key(e, c.scope, c.date, c.region, c.service, derive)
        if hex(hmac_prepared(skey, f.policy)) ~= string.lower(f["x-amz-signature"]) then
            return nil, "signature_mismatch"
        end
        return true
    end
    if f.signature and f.awsaccesskeyid then
        if f.awsaccesskeyid ~= akid or v2.signature(e.secret, f.policy) ~= f.signature then
            return nil, "signature_mismatch"
        end
        return true
    end
    return nil, "signature_unverifiable"
end

--- Verify the request's signature when access key id akid has a secret on file (headers: the
--- request's header table of tollgate.request.headers; vbucket: the bucket of a
--- virtual-hosted request). Returns true (verified, or no secret on file), or nil, reason.
function _M.check(akid, headers, method, vbucket)
    local e = secrets.get(akid)
    if not e then
        return true
    end
    if e == secrets.UNAVAILABLE then
        return nil, "signature_unverifiable"
    end
    headers = reqheaders.all(headers)
    local path, q = target()
    local auth = headers.authorization
    if type(auth) == "table" then
        return nil, "authorization_malformed"
    end
    if auth ~= nil then
        if sub(auth, 1, 17) == "AWS4-HMAC-SHA256 " then
            return v4_header(e, akid, auth, method, headers, path, q)
        elseif sub(auth, 1, 4) == "AWS " then
            return v2_header(e, akid, auth, method, headers, path, q, vbucket)
        end
        return nil, "signature_unverifiable"      -- SigV4a and the like
    end
    local ps = v4.params(q)
    if param(ps, "X-Amz-Credential") ~= nil or param(ps, "X-Amz-Signature") ~= nil then
        return v4_presigned(e, akid, method, headers, path, ps)
    end
    if param(ps, "AWSAccessKeyId") ~= nil or param(ps, "Signature") ~= nil then
        return v2_presigned(e, akid, method, headers, path, ps, vbucket)
    end
    return post_form(e, akid, headers)              -- a browser POST upload, or nothing we check
end

return _M
