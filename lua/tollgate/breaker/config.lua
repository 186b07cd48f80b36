-- Circuit-breaker configs (docs/rules-contract.md §3; fields the gateway does not use, e.g. audit
-- stamps of the API, are ignored): `ratelimit:breakers` (name -> JSON) is read in the same
-- reload as the apps into config_dict key "breakers" (one JSON object of the good configs), and
-- compiled by each worker once per config generation (tollgate.breaker.breaker).
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local hashload = require("tollgate.config.hashload")
local settings = require("tollgate.settings")

local type = type
local floor = math.floor
local pairs = pairs

local unpack = unpack

local _M = {}

local CDICT_KEY = "breakers"

-- The numeric fields, as schema entries of tollgate.settings (one checker of bounded values);
-- absent fields take the contract's example values, the bounds are the API's (rules/breaker.go).
local FIELDS = {
    { key = "window_ms", kind = "integer", default = 10000, min = 100, max = 3600000 },
    { key = "min_requests", kind = "integer", default = 10, min = 1, max = 1000000 },
    { key = "failure_threshold", kind = "integer", default = 5, min = 1, max = 1000000 },
    { key = "failure_ratio", kind = "number", default = 0.5, above = 0, max = 1 },
    { key = "open_timeout_ms", kind = "integer", default = 30000, min = 100, max = 3600000 },
    { key = "success_threshold", kind = "integer", default = 3, min = 1, max = 1000000 },
    { key = "half_open_max_inflight", kind = "integer", default = 1, min = 1, max = 1000000 },
}
local MAX_STATUSES = 100

local function statuses(fs)
    if fs == nil then
        return { 500, 502, 503, 504 }
    end
    if type(fs) ~= "table" then
        return nil, "failure_statuses", "invalid_type"
    end
    local n = 0
    for _, v in pairs(fs) do
        n = n + 1
        if type(v) ~= "number" or v ~= floor(v) then
            return nil, "failure_statuses", "invalid_type"
        end
    end
    if n ~= #fs then
        return nil, "failure_statuses", "invalid_type"
    elseif n == 0 then
        return nil, "failure_statuses", "empty_list"
    elseif n > MAX_STATUSES then
        return nil, "failure_statuses", "too_many"
    end
    local seen = {}
    for i, v in ipairs(fs) do
        if v < 500 or v > 599 then
            return nil, "failure_statuses[" .. (i - 1) .. "]", "invalid_status"
        elseif seen[v] then
            return nil, "failure_statuses[" .. (i - 1) .. "]", "duplicate"
        end
        seen[v] = true
    end
    return fs
end

--- Check one breaker config (a decoded table) stored under `name`. Returns a normalized table,
-- or nil, field, reason (the API's field path and code; testdata/breakers/ is the corpus the
-- gateway, the API and the console share).
function _M.parse(name, c)
    if type(c) ~= "table" then
        return nil, "json", "invalid_json"
    end
    if c.name ~= nil and c.name ~= name then
        return nil, "name", "name_mismatch"
    end
    local out = { name = name }
    for _, f in ipairs({ "enabled", "per_app" }) do
        local v = c[f]
        if v ~= nil and type(v) ~= "boolean" then
            return nil, f, "invalid_type"
        end
    end
    out.enabled = c.enabled ~= false
    out.per_app = c.per_app == true
    for _, e in ipairs(FIELDS) do
        local v = c[e.key]
        if v == nil then
            v = e.default
        end
        local ok, _, problem = settings.check(e, v, false)
        if ok == nil then
            return nil, e.key, problem == "type" and "invalid_type" or "invalid_" .. e.key
        end
        out[e.key] = ok
    end
    local fs, field, reason = statuses(c.failure_statuses)
    if not fs then
        return nil, field, reason
    end
    out.failure_statuses = fs
    return out
end

--- Load `ratelimit:breakers` (HSCAN) into config_dict. A damaged entry keeps its last good
-- config (an unknown one is skipped). Returns the number of damaged entries, or nil, err.
function _M.reload(red, cdict)
    local last = cjson.decode(cdict:get(CDICT_KEY) or "{}") or {}
    local fresh, bad = {}, 0
    local ok, err = hashload.each(red, keys.breakers_index(), function(name, json)
        local c, perr, code
        if keys.valid_id(name) then
            c, perr, code = _M.parse(name, cjson.decode(json))
            perr = tostring(perr) .. " " .. tostring(code)
        else
            perr = "invalid name"
        end
        if c then
            fresh[name] = c
            return
        end
        bad = bad + 1
        ngx.log(ngx.ERR, "tollgate: bad config of breaker ", name, " (", perr,
            "), keeping the last good one")
        if keys.valid_id(name) and last[name] then
            fresh[name] = last[name]
        end
    end)
    if not ok then
        return nil, err
    end
    ok, err = cdict:safe_set(CDICT_KEY, cjson.encode(fresh))
    if not ok then
        return nil, "config_dict: " .. tostring(err)
    end
    return bad
end

--- Apply changed breakers `names` (one HMGET of `ratelimit:breakers`): each is set to its new
--- config, removed when gone, or kept when it does not parse. Returns the number of damaged
--- entries, or nil, err.
function _M.apply(red, cdict, names)
    local vals, err = red:hmget(keys.breakers_index(), unpack(names))
    if not vals then
        return nil, err
    end
    local t = cjson.decode(cdict:get(CDICT_KEY) or "{}") or {}
    local bad = 0
    for i, name in ipairs(names) do
        local json = vals[i]
        if json == ngx.null or json == nil then
            t[name] = nil
        else
            local c, perr, code = _M.parse(name, cjson.decode(json))
            if c then
                t[name] = c
            else
                bad = bad + 1
                ngx.log(ngx.ERR, "tollgate: bad config of breaker ", name, " (", tostring(perr),
                    " ", tostring(code), "), keeping the last good one")
            end
        end
    end
    local ok, serr = cdict:safe_set(CDICT_KEY, next(t) and cjson.encode(t) or "{}")
    if not ok then
        return nil, "config_dict: " .. tostring(serr)
    end
    return bad
end

--- The loaded configs ({name = config}) as config_dict holds them.
function _M.loaded(cdict)
    local s = cdict:get(CDICT_KEY)
    local t = s and cjson.decode(s)
    return type(t) == "table" and t or {}
end

return _M
