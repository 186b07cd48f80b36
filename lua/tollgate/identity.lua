-- Whom a request is charged to: the sources of TOLLGATE_APP_SOURCES in order (S3 credentials,
-- the app header, an nginx variable), then the bucket's owner for anonymous requests. Also the
-- S3 settings of the gateway (addressing domains, error dialect) and the maps Redis holds for
-- them: `ratelimit:access_keys` (access key id -> app) and `ratelimit:buckets` (bucket -> app),
-- loaded into config_dict with the app configs and looked up through app_of_key() and
-- app_of_bucket() alone (so that a later version can fetch keys on demand instead).
local s3 = require("tollgate.s3")
local keys = require("tollgate.keys")
local ipmatch = require("tollgate.request.ipmatch")
local hashload = require("tollgate.config.hashload")
local reqheaders = require("tollgate.request.headers")
local lookup = require("tollgate.config.lookup")

local type = type
local tonumber = tonumber
local find = string.find
local lower = string.lower
local var = ngx.var
local cdict = ngx.shared.config_dict

local _M = {}

local KEY, HEADER, VAR = 1, 2, 3
local SOURCES = {}          -- array of {kind, name}
local NSOURCES = 0
local TRUSTED_ONLY = false
local TRUSTED = {}
local DEFAULT_APP
local app_header_lc, app_header
local FORM_MAX = 65536       -- bytes of a browser POST form read for its credential fields
local AMBIGUOUS = s3.AMBIGUOUS
local chain             -- the identify() of the configured sources (below)

_M.DOMAINS = {}
_M.ERROR_S3 = false          -- TOLLGATE_ERROR_FORMAT=s3: every refusal in S3's dialect
_M.THROTTLE_STATUS = 503
_M.DELETE_MAX = 2 * 1048576  -- bytes of a DeleteObjects body read to count its keys

--- The refusals of identify() that tollgate.request.access answers (reason -> status,
-- message) and their S3 error (reason -> status, code, message) for tollgate.request.response.
_M.REFUSALS = {
    ambiguous_credentials = { 400, "the request carries credentials that name more than one "
        .. "access key, or a credential parameter a backend could read differently" },
    malformed_credentials = { 400, "the request's S3 credentials cannot be read" },
    post_fields_too_large = { 400, "the form fields before the file are too large" },
    malformed_xml = { 400, "the DeleteObjects body is not well-formed XML with at most 1000 "
        .. "keys" },
    message_too_long = { 400, "the DeleteObjects body is larger than the gateway reads" },
    lookup_budget_exhausted = { 503, "the node looks up no more unknown ids this second: retry" },
}
_M.S3_CODES = {
    ambiguous_credentials = { 400, "InvalidArgument", "Only one auth mechanism allowed; only "
        .. "one access key id may be given, in one parameter, header or form field" },
    malformed_credentials = { 400, "AuthorizationHeaderMalformed",
        "The authorization header or query parameters are malformed." },
    post_fields_too_large = { 400, "MaxPostPreDataLengthExceeded",
        "Your POST request fields preceding the upload file were too large." },
    malformed_xml = { 400, "MalformedXML", "The XML you provided was not well-formed or did "
        .. "not validate against our published schema." },
    message_too_long = { 400, "MaxMessageLengthExceeded", "Your request was too big." },
    lookup_budget_exhausted = { 503, "SlowDown", "Please reduce your request rate." },
}

local function split(s)
    local out = {}
    for item in s:gmatch("[^,]+") do
        item = item:match("^%s*(.-)%s*$")
        if item ~= "" then
            out[#out + 1] = item
        end
    end
    return out
end

--- Take the identity settings of s (tollgate.settings: app_sources, app_header_from,
-- default_app, s3_domains, error_format, s3_throttle_status, app_header, trusted_proxies);
-- error() on bad values (nginx refuses to start).
function _M.configure(s)
    app_header = s.app_header
    app_header_lc = lower(app_header)
    TRUSTED = s.trusted_proxies or {}
    local src = s.app_sources or "s3_access_key,header"
    SOURCES, NSOURCES = {}, 0
    local seen = {}
    for _, name in ipairs(split(src)) do
        local kind, arg
        if name == "s3_access_key" then
            kind = KEY
        elseif name == "header" then
            kind = HEADER
        else
            arg = name:match("^var:([%w_]+)$")
            if not arg then
                error("TOLLGATE_APP_SOURCES: unknown source '" .. name .. "' (s3_access_key, "
                    .. "header, var:<nginx variable>)", 0)
            end
            kind = VAR
        end
        if seen[name] then
            error("TOLLGATE_APP_SOURCES: source '" .. name .. "' listed twice", 0)
        end
        seen[name] = true
        NSOURCES = NSOURCES + 1
        SOURCES[NSOURCES] = { kind, arg }
    end
    if NSOURCES == 0 then
        error("TOLLGATE_APP_SOURCES must name at least one source", 0)
    end
    TRUSTED_ONLY = s.app_header_from == "trusted"
    if TRUSTED_ONLY and #TRUSTED == 0 then
        error("TOLLGATE_APP_HEADER_FROM=trusted needs TOLLGATE_TRUSTED_PROXIES", 0)
    end
    DEFAULT_APP = s.default_app
    local domains = {}
    for _, d in ipairs(split(s.s3_domains or "")) do
        d = lower(d)
        if not d:match("^[%w][%w%.%-]*$") or find(d, "..", 1, true) then
            error("TOLLGATE_S3_DOMAINS: bad domain '" .. d .. "'", 0)
        end
        domains[#domains + 1] = d
    end
    _M.DOMAINS = domains
    _M.identify = chain()
    _M.ERROR_S3 = s.error_format == "s3"
    _M.THROTTLE_STATUS = tonumber(s.s3_throttle_status) or 503
    return _M
end

--- The request headers identity reads (besides the app header).
function _M.headers()
    local h = { "authorization" }
    if _M.DOMAINS[1] then
        h[#h + 1] = "host"
    end
    return h
end

-- per worker: the answers of config_dict ("ak:<key>", "bk:<bucket>") for the current config,
-- each cache with its own bound (wiped when full; flush() drops what a new generation changed)
local CACHE_MAX = 20000
local keys_c, buckets_c = { n = 0, t = {} }, { n = 0, t = {} }

local function forget(c, ids)
    for k in pairs(ids or {}) do
        if c.t[k] ~= nil then
            c.t[k] = nil
            c.n = c.n - 1
        end
    end
end

--- A new config generation (config.on_generation): forget the cached answers of the access
--- keys and buckets it changed (drop.key, drop.bucket), or all of them (drop nil).
function _M.flush(_, drop)
    if drop then
        forget(keys_c, drop.key)
        forget(buckets_c, drop.bucket)
        return
    end
    keys_c.t, keys_c.n, buckets_c.t, buckets_c.n = {}, 0, {}, 0
end

local UNVERIFIED, BUDGET = lookup.UNVERIFIED, lookup.BUDGET
local ACCESS_KEYS, BUCKETS = keys.access_keys(), keys.buckets()

-- The app of map entry k: config_dict key prefix .. k, through cache c (positive answers
-- only: a made-up id costs a read of the dict, never a cache entry); while the dict holds part
-- of the config, a bounded lookup of field k of Redis hash `hash` (tollgate.config.lookup, kind
-- its prefix there). Returns the app id, false when unknown, nil when it could not be looked up
-- (nil, "lookup_budget_exhausted": for want of the node's lookup budget).
local function lookup_map(c, prefix, kind, hash, k)
    local a = c.t[k]
    if a ~= nil then
        return a
    end
    a = cdict:get(prefix .. k)
    if not a then
        if not lookup.partial() then
            return false
        end
        local err
        a, err = lookup.get(kind, hash, k)
        if not a then
            return a, err
        end
        if not keys.valid_id(a) then
            return false
        end
    end
    if c.n >= CACHE_MAX then
        c.t, c.n = {}, 0
    end
    c.t[k] = a
    c.n = c.n + 1
    return a
end

--- The app of access key id `akid` (a valid key): app id, false when the key is unknown, nil
-- when it could not be looked up. The one place a key is resolved.
local function app_of_key(akid)
    return lookup_map(keys_c, "ak:", "k:", ACCESS_KEYS, akid)
end
_M.app_of_key = app_of_key

--- The app owning `bucket`: app id, false, or nil when it could not be looked up.
local function app_of_bucket(bucket)
    return lookup_map(buckets_c, "bk:", "b:", BUCKETS, bucket)
end
_M.app_of_bucket = app_of_bucket

local function valid_bucket(b)
    return type(b) == "string" and #b >= 1 and #b <= 255 and not find(b, "[^%w%.%-_]")
end
_M.valid_bucket = valid_bucket

-- Load hash `key` into config_dict under `prefix` (tollgate.config.hashload: page by page,
-- what is gone dropped without a walk of the dict): field checked by valid_field, value an app
-- id. Entries that do not check out are skipped and counted. Returns the count or nil, err.
local function load_map(red, key, prefix, valid_field)
    local bad, err, full = hashload.into_dict(red, key, cdict, prefix, nil, function(field, app)
        if keys.valid_id(app) then
            return true
        end
        ngx.log(ngx.ERR, "tollgate: bad entry in ", key, " (field of ", #field, " bytes), skipped")
        return nil
    end, valid_field)
    if not bad then
        return nil, err
    end
    if full and full > 0 then
        cdict:incr("zone_full_total", full, 0)
        cdict:set("partial", full)      -- ratelimit_config_dict_partial: the alert
        ngx.log(ngx.ERR, "tollgate: config_dict is full: ", full, " entries of ", key,
            " did not fit (raise lua_shared_dict config_dict, docs/scale.md)")
    end
    return bad
end

--- Load both maps from Redis into config_dict (config reload). Returns bad entries or nil, err.
function _M.reload(red)
    local b1, err = load_map(red, keys.access_keys(), "ak:", s3.valid_key)
    if not b1 then
        return nil, err
    end
    local b2, err2 = load_map(red, keys.buckets(), "bk:", valid_bucket)
    if not b2 then
        return nil, err2
    end
    return b1 + b2
end

-- Credentials of a browser POST upload: the form fields before the file (at most FORM_MAX
-- bytes of them, S3 allows 20 KB). Returns akid, how; nil; or nil, nil, reason.
local function form_key(headers)
    -- Content-Type is not among the headers read for every request: only this one needs it
    local boundary = s3.form_boundary(reqheaders.all(headers)["content-type"])
    if not boundary then
        return nil
    end
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    local truncated = false
    if not body then
        local path = ngx.req.get_body_file()
        if not path then
            return nil
        end
        local f = io.open(path, "rb")
        if not f then
            return nil
        end
        body = f:read(FORM_MAX + 1) or ""
        f:close()
    end
    if #body > FORM_MAX then
        body, truncated = body:sub(1, FORM_MAX), true
    end
    return s3.from_form(body, boundary, truncated)
end

--- The S3 credentials of a request: access key id and its form; nil without any; nil, nil,
-- reason (REFUSALS) when its credentials could be read as more than one key id (two
-- Authorization headers, header and query or form naming different keys, and whatever
-- tollgate.s3.credentials refuses) or cannot be read at all.
function _M.credentials(headers, q, op)
    local auth = headers.authorization
    if type(auth) == "table" then
        return nil, nil, AMBIGUOUS
    end
    local akid, how, err = s3.from_authorization(auth)
    if err then
        return nil, nil, err
    end
    if q then
        local k, h, qerr = s3.from_query(q)
        if qerr then
            return nil, nil, qerr
        end
        if k then
            if akid and k ~= akid then
                return nil, nil, AMBIGUOUS
            end
            if not akid then
                akid, how = k, h
            end
        end
    end
    if op == "PostObject" then
        local k, h, ferr = form_key(headers)
        if ferr then
            return nil, nil, ferr
        end
        if k then
            if akid and k ~= akid then
                return nil, nil, AMBIGUOUS
            end
            if not akid then
                akid, how = k, h
            end
        end
    end
    return akid, how
end

-- The sources of TOLLGATE_APP_SOURCES as one chain of functions, built once by configure():
-- each source's step either answers or tail-calls the next one, and the last hands over to the
-- bucket's owner. A loop over the configured sources in the request path ended the access
-- phase's compiled trace at the loop (and which trace LuaJIT then started where varied from
-- run to run); the chain is straight-line code a trace runs through.
-- Each step: (ctx, headers, q, op, vbucket, uri) -> app id, access key id | nil, reason, key.
local function by_owner(_, _, _, _, vbucket, uri)
    local bucket = s3.address(vbucket, uri)     -- anonymous: the bucket's owner, if any
    if bucket ~= nil and valid_bucket(bucket) then
        local app, lerr = app_of_bucket(bucket)
        if app then
            return app
        elseif lerr == BUDGET then
            return nil, lerr
        elseif app == nil then
            return UNVERIFIED
        end
    end
    return nil, "missing_app_id"
end

local function by_key(nxt)
    return function(ctx, headers, q, op, vbucket, uri)
        local akid, _, cerr = _M.credentials(headers, q, op)
        if akid == nil and cerr == nil then
            return nxt(ctx, headers, q, op, vbucket, uri)
        end
        ctx.tg_s3 = true
        if cerr then
            return nil, cerr, nil
        end
        if not s3.valid_key(akid) then
            return nil, "invalid_access_key", nil
        end
        local app, lerr = app_of_key(akid)
        if app then
            return app, akid
        elseif lerr == BUDGET then
            return nil, lerr, akid
        elseif app == nil then
            return UNVERIFIED, akid     -- Redis did not answer: fail-open, one budget
        end
        if DEFAULT_APP then
            return DEFAULT_APP, akid
        end
        return nil, "unknown_access_key", akid
    end
end

local function by_header(nxt)
    return function(ctx, headers, q, op, vbucket, uri)
        local v = headers[app_header_lc]
        if v == nil or TRUSTED_ONLY
                and not ipmatch.any(TRUSTED, ipmatch.parse(var.remote_addr) or "") then
            return nxt(ctx, headers, q, op, vbucket, uri)
        end
        ctx.tg_named = true
        if type(v) == "table" then
            return nil, "duplicate_app_id"
        end
        return v
    end
end

local function by_var(name, nxt)
    return function(ctx, headers, q, op, vbucket, uri)
        local v = var[name]
        if v == nil or v == "" then
            return nxt(ctx, headers, q, op, vbucket, uri)
        end
        ctx.tg_named = true
        return v
    end
end

-- the chain of SOURCES (configure)
chain = function()
    local step = by_owner
    for i = NSOURCES, 1, -1 do
        local kind, arg = SOURCES[i][1], SOURCES[i][2]
        if kind == KEY then
            step = by_key(step)
        elseif kind == HEADER then
            step = by_header(step)
        else
            step = by_var(arg, step)
        end
    end
    return step
end

--- Whom to charge (vbucket: the bucket of a virtual-hosted request, uri: $uri). Returns app
-- id, access key id (nil without credentials); or nil, reason, access key id for a request to
-- refuse. Reasons: unknown_access_key, invalid_access_key, duplicate_app_id, missing_app_id and
-- those of REFUSALS. Sets ctx.tg_s3 for requests with S3 credentials.
-- (Replaced by configure() with the chain of the configured sources.)
_M.identify = by_owner

function _M.app_header()
    return app_header
end

return _M
