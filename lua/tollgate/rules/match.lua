-- What a rule matches a request on (docs/rules-contract.md §2): the request's facts — bucket and
-- key of the path, client address, headers, user — computed once per request when the first
-- candidate rule needs them, and whether rule r matches the request (its scope key).
-- tollgate.rules.check calls begin() before a request's candidates, and again after a yield
-- (other requests of the worker used the facts meanwhile).
local ipmatch = require("tollgate.request.ipmatch")
local glob_match = require("tollgate.rules.glob").match

local var = ngx.var
local md5 = ngx.md5
local byte = string.byte
local find = string.find
local sub = string.sub
local type = type
local SLASH = 47

local _M = {}

local trusted = {}              -- TOLLGATE_TRUSTED_PROXIES (CIDRs)

--- Settings: trusted_proxies (the request path wants X-Forwarded-For when there are some).
function _M.init(settings)
    trusted = settings.trusted_proxies or {}
end

-- bytes that end an access key id: whitespace, and the separators after it
local ENDS = {}
for _, c in ipairs({ 9, 10, 11, 12, 13, 32 }) do
    ENDS[c] = true
end

-- The run of bytes of s from i up to (not including) byte `stop`; nil when it is empty or
-- ends at `other`, whitespace or the end of s instead.
local function run_to(s, i, stop, other)
    local j = i
    local c = byte(s, j)
    while c and c ~= stop and c ~= other and not ENDS[c] do
        j = j + 1
        c = byte(s, j)
    end
    if c ~= stop or j == i then
        return nil
    end
    return sub(s, i, j - 1)
end

local CRED = "Credential="
local COLON, COMMA = 58, 44

--- The S3 access key id of an Authorization header (SigV4 Credential=AKID/..., V2 AWS AKID:sig):
-- the first "Credential=" that is followed by a run of bytes other than '/', ',' and whitespace
-- and a '/', else a leading "AWS " followed by bytes other than ':' and whitespace and a ':'.
function _M.access_key(auth)
    if type(auth) ~= "string" then
        return nil
    end
    local c = find(auth, CRED, 1, true)
    while c do
        local k = run_to(auth, c + #CRED, SLASH, COMMA)
        if k then
            return k
        end
        c = find(auth, CRED, c + 1, true)
    end
    if sub(auth, 1, 4) == "AWS " then
        return run_to(auth, 5, COLON, COLON)
    end
    return nil
end

-- Per-request facts, computed once when the first rule needs them.
local req = {}
_M.req = req

--- Start on a request of app `app` whose headers are `headers`.
function _M.begin(headers, app)
    req.headers, req.app, req.ip, req.ip_bin, req.uri = headers, app, nil, nil, nil
end

-- the last address parsed without a forwarded hop (a keep-alive connection's requests share it)
local last_remote, last_ip, last_bin = nil, "", false

--- The client's address (text, and binary for CIDRs; "" and false when it has none).
local function client_ip()
    if req.ip == nil then
        local remote = var.remote_addr
        local xff = nil
        if #trusted > 0 then
            xff = req.headers["x-forwarded-for"]    -- wanted by the handler with trusted proxies
        end
        if xff == nil and remote == last_remote then
            req.ip, req.ip_bin = last_ip, last_bin
        else
            local ip, bin = ipmatch.client(remote, xff, trusted)
            req.ip, req.ip_bin = ip or "", bin or false
            if xff == nil then
                last_remote, last_ip, last_bin = remote, req.ip, req.ip_bin
            end
        end
    end
    return req.ip, req.ip_bin
end

-- The bucket of the path (plain finds: a pattern match leaves the compiled trace); req.kpos is
-- where its key starts (past the end: none).
local function path()
    if req.uri == nil then
        local uri = var.uri
        req.uri = uri
        local slash = find(uri, "/", 2, true)
        if byte(uri, 1) ~= SLASH or slash == 2 then
            req.bucket, req.kpos = "", #uri + 1        -- no bucket: no key either
        elseif not slash then
            req.bucket, req.kpos = sub(uri, 2), #uri + 1
        else
            req.bucket, req.kpos = sub(uri, 2, slash - 1), slash + 1
        end
    end
    return req.uri
end

-- Whether the key of the path (after path()) starts with prefix p.
local function key_starts(p)
    local uri, k = req.uri, req.kpos
    return #uri - k + 1 >= #p and sub(uri, k, k + #p - 1) == p
end

--- The request's bucket ("" when the path has none), for the index.
function _M.bucket()
    path()
    return req.bucket
end
_M.client_ip = client_ip

-- Whether header value v (a string, or the list of a repeated header's values) is, or
-- holds, value x.
local function has_value(v, x)
    if v == x then
        return true
    end
    if type(v) == "table" then
        for i = 1, #v do
            if v[i] == x then
                return true
            end
        end
    end
    return false
end

--- Scope key of rule r for this request, or nil when the rule does not match it; nil and the
-- header's name when the request repeats the header the rule's user key comes from (which of
-- its values the backend believes is unknown: the request is refused, never let past).
function _M.matches(r)
    local h = req.headers
    if r.bucket or r.key_prefix or r.path_glob then
        local uri = path()
        if (r.bucket and req.bucket ~= r.bucket)
                or (r.key_prefix and not key_starts(r.key_prefix))
                or (r.path_glob and not glob_match(r.path_glob, uri)) then
            return nil
        end
    end
    local hs = r.headers
    if hs then
        for i = 1, #hs do
            if not has_value(h[hs[i][1]], hs[i][2]) then
                return nil
            end
        end
    end
    if r.cidrs then
        local _, bin = client_ip()
        if not bin or not ipmatch.any(r.cidrs, bin) then
            return nil
        end
    end
    local scope = r.scope
    if scope == "global" or scope == "endpoint" then
        return ""
    elseif scope == "app" then
        return req.app
    elseif scope == "ip" then
        local ip = client_ip()
        return ip ~= "" and ip or nil
    end
    local u
    if r.user_s3 then
        u = h["authorization"]
        if type(u) == "table" then
            return nil, "authorization"
        end
        u = _M.access_key(u)
    else
        u = h[r.user_header]
        if type(u) == "table" then
            return nil, r.user_header
        end
    end
    if type(u) ~= "string" or u == "" then
        return nil
    end
    if u == r.u_raw then       -- the same user as this rule's last request
        return r.u_key
    end
    local k = u
    if #u > 64 or find(u, "[^%w%-_.@]") then
        k = md5(u)
    end
    r.u_raw, r.u_key = u, k
    return k
end

return _M
