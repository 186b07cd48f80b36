-- The secrets of the access keys whose signatures the gateway verifies. The control plane
-- stores them sealed (AES-256-GCM, internal/secrets) in ratelimit:access_key_secrets, access key
-- id -> "tgs1.<key id>.<base64(nonce || ciphertext || tag)>" with the access key id as additional
-- data; worker 0 loads that hash into config_dict ("sk:<key>", still sealed) with the config and
-- applies the change log's "key" entries to it. A worker opens a key's secret once per config
-- generation (the first request that needs it) and keeps it, with the key's SigV4 signing keys
-- per (day, region, service), in a bounded worker-local cache that a new generation flushes for
-- the keys it changed. The key file (TOLLGATE_SECRETS_KEY_FILE) is read once in init_by_lua, by
-- the master (root): the workers never read it, and the plain secrets never leave worker memory.
local crypto = require("tollgate.s3.sigcrypto")
local keys = require("tollgate.keys")
local hashload = require("tollgate.config.hashload")
local lrucache = require("resty.lrucache")

local sub = string.sub
local find = string.find
local type = type
local cdict = ngx.shared.config_dict

local _M = {}

local PREFIX = "sk:"
local KEYS = {}                 -- key id -> 32-byte key
local NKEYS = 0
local CACHE_MAX = 10000         -- access keys whose secret (or its absence) a worker keeps
local SCOPES_MAX = 16           -- SigV4 signing keys kept per access key (days x regions)
local NONE = false

_M.UNAVAILABLE = "unavailable"  -- a key has a secret on file that this gateway cannot open

local cache

local function key_id(k)
    return crypto.hex(crypto.sha256(k)):sub(1, 8)
end

--- The keys of a key file's contents: { id = key } and the count; or nil, err.
function _M.parse_keys(text)
    local out, n, line = {}, 0, 0
    for l in (text .. "\n"):gmatch("([^\n]*)\n") do
        line = line + 1
        l = l:match("^%s*(.-)%s*$")
        if l ~= "" and sub(l, 1, 1) ~= "#" then
            local k
            if #l == 64 and l:match("^%x+$") then
                k = l:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
            else
                k = crypto.unb64(l)
            end
            if not k or #k ~= 32 then
                return nil, "line " .. line
                    .. ": want 32 bytes as base64 (44 characters) or hex (64)"
            end
            out[key_id(k)] = k
            n = n + 1
        end
    end
    if n == 0 then
        return nil, "the key file holds no key"
    end
    return out, n
end

--- Read the key file at `path` (init_by_lua; "" or nil: none, and no secret can be opened);
--- error() when it cannot be read or holds no valid key (nginx refuses to start).
function _M.configure(path)
    KEYS, NKEYS = {}, 0
    cache = lrucache.new(CACHE_MAX)
    if path == nil or path == "" then
        return
    end
    local f, err = io.open(path, "rb")
    if not f then
        error("TOLLGATE_SECRETS_KEY_FILE: " .. tostring(err), 0)
    end
    local text = f:read("*a")
    f:close()
    local ks, n = _M.parse_keys(text or "")
    if not ks then
        error("TOLLGATE_SECRETS_KEY_FILE " .. path .. ": " .. n, 0)
    end
    KEYS, NKEYS = ks, n
end

--- The plain secret of `sealed` for access key id akid, or nil, reason.
function _M.open(akid, sealed, ks)
    ks = ks or KEYS
    if type(sealed) ~= "string" or sub(sealed, 1, 5) ~= "tgs1." then
        return nil, "malformed"
    end
    local dot = find(sealed, ".", 6, true)
    if dot ~= 14 then
        return nil, "malformed"
    end
    local k = ks[sub(sealed, 6, 13)]
    if not k then
        return nil, "unknown key"
    end
    local raw = crypto.unb64(sub(sealed, 15))
    if not raw or #raw < 12 + 16 + 1 then
        return nil, "malformed"
    end
    return crypto.aes_gcm_open(k, sub(raw, 1, 12), sub(raw, 13, -17), sub(raw, -16), akid)
end

-- a sealed value as the control plane writes it (checked when loaded; opened when used)
local function check(_, v)
    if type(v) == "string" and sub(v, 1, 5) == "tgs1." and #v < 1024 then
        return true
    end
    return nil, "not a sealed secret"
end

--- Load the secrets hash into config_dict (worker 0, full config load). Returns the count of
--- refused entries or nil, err.
function _M.reload(red, valid_key)
    local bad, err, full = hashload.into_dict(red, keys.access_key_secrets(), cdict, PREFIX,
        "secret of access key", check, valid_key)
    if not bad then
        return nil, err
    end
    if full and full > 0 then
        cdict:incr("zone_full_total", full, 0)
        ngx.log(ngx.ERR, "tollgate: config_dict is full: ", full, " access key secrets did not ",
            "fit; those keys are refused until it has room (raise lua_shared_dict config_dict)")
    end
    return bad
end

--- Apply the changed access keys `ids` of the change log (worker 0): one HMGET. Returns true
--- or nil, err.
function _M.apply(red, ids)
    if not ids then
        return true
    end
    local vals, err = hashload.hmget(red, keys.access_key_secrets(), ids)
    if not vals then
        return nil, err
    end
    for i, id in ipairs(ids) do
        local v = vals[i]
        if v == ngx.null or v == nil or not check(id, v) then
            cdict:delete(PREFIX .. id)
            hashload.note(cdict, PREFIX, id, false)
        else
            local ok, serr = cdict:safe_set(PREFIX .. id, v)
            if not ok then
                cdict:delete(PREFIX .. id)
                ngx.log(ngx.ERR, "tollgate: config_dict: cannot hold the secret of an access ",
                    "key: ", tostring(serr))
                -- a key whose secret found no room must not pass unverified: remembered
                cdict:safe_set(PREFIX .. id, "full")
            end
            hashload.note(cdict, PREFIX, id, true)
        end
    end
    return true
end

--- A new config generation: forget the keys it changed (drop.key), or every key (drop nil).
function _M.flush(_, drop)
    if not cache then
        return
    end
    if drop then
        for id in pairs(drop.key or {}) do
            cache:delete(id)
        end
        return
    end
    cache:flush_all()
end

local logged = 0

--- The secret entry of access key id akid: { secret = ..., v4 = {scope = signing key} }; false
--- when the key has no secret on file (signatures are left to the backend); UNAVAILABLE when
--- it has one this gateway cannot open (no key file, another key, tampered with).
function _M.get(akid)
    local e = cache:get(akid)
    if e ~= nil then
        return e
    end
    local sealed = cdict:get(PREFIX .. akid)
    if sealed == nil then
        e = NONE
    else
        local secret, why
        if NKEYS == 0 then
            why = "no TOLLGATE_SECRETS_KEY_FILE"
        else
            secret, why = _M.open(akid, sealed)
        end
        if secret then
            e = { secret = secret, v4 = {}, n = 0 }
        else
            e = _M.UNAVAILABLE
            local t = ngx.now()
            if t - logged >= 10 then
                logged = t
                ngx.log(ngx.ERR, "tollgate: the secret of an access key cannot be opened (",
                    tostring(why), "): its requests are refused")
            end
        end
    end
    cache:set(akid, e)
    return e
end

--- The SigV4 signing key of entry e for scope (date/region/service/aws4_request): cached.
function _M.signing_key(e, scope, date, region, service, derive)
    local k = e.v4[scope]
    if k then
        return k
    end
    if e.n >= SCOPES_MAX then
        e.v4, e.n = {}, 0
    end
    k = derive(e.secret, date, region, service)
    e.v4[scope] = k
    e.n = e.n + 1
    return k
end

return _M
