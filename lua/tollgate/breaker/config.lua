-- Circuit-breaker configs (contract §3; fields the gateway does not use, e.g. audit stamps of the
-- API, are ignored): `ratelimit:breakers` (name -> JSON) is read in the same
-- reload as the apps into config_dict key "breakers" (one JSON object of the good configs), and
-- compiled by each worker once per config generation (tollgate.breaker.breaker).
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local hashload = require("tollgate.config.hashload")

local type = type
local floor = math.floor
local pairs = pairs

local _M = {}

local CDICT_KEY = "breakers"

-- field -> {default, min, max, integer}; absent fields take the contract's example values
local NUMBERS = {
    window_ms = { 10000, 100, 3600000, true },
    min_requests = { 10, 1, 1e9, true },
    failure_threshold = { 5, 1, 1e9, true },
    failure_ratio = { 0.5, 0, 1, false },
    open_timeout_ms = { 30000, 100, 86400000, true },
    success_threshold = { 3, 1, 1e6, true },
    half_open_max_inflight = { 1, 1, 1e6, true },
}

--- Check one breaker config (a decoded table) stored under `name`. Returns a normalized table
-- or nil, err (err names the field).
function _M.parse(name, c)
    if type(c) ~= "table" then
        return nil, "not an object"
    end
    if c.name ~= nil and c.name ~= name then
        return nil, "name does not match its hash field"
    end
    local out = { name = name }
    for _, f in ipairs({ "enabled", "per_app" }) do
        local v = c[f]
        if v ~= nil and type(v) ~= "boolean" then
            return nil, "invalid " .. f
        end
    end
    out.enabled = c.enabled ~= false
    out.per_app = c.per_app == true
    for f, spec in pairs(NUMBERS) do
        local v = c[f]
        if v == nil then
            v = spec[1]
        end
        if type(v) ~= "number" or v < spec[2] or v > spec[3]
                or (spec[4] and v ~= floor(v)) then
            return nil, "invalid " .. f
        end
        out[f] = v
    end
    if c.failure_ratio ~= nil and c.failure_ratio <= 0 then
        return nil, "invalid failure_ratio"
    end
    local fs = c.failure_statuses
    if fs == nil then
        fs = { 500, 502, 503, 504 }
    end
    if type(fs) ~= "table" then
        return nil, "invalid failure_statuses"
    end
    local list = {}
    for i, s in pairs(fs) do
        if type(i) ~= "number" or type(s) ~= "number" or s ~= floor(s) or s < 100 or s > 599 then
            return nil, "invalid failure_statuses"
        end
        list[#list + 1] = s
    end
    out.failure_statuses = list
    return out
end

--- Load `ratelimit:breakers` (HSCAN) into config_dict. A damaged entry keeps its last good
-- config (an unknown one is skipped). Returns the number of damaged entries, or nil, err.
function _M.reload(red, cdict)
    local last = cjson.decode(cdict:get(CDICT_KEY) or "{}") or {}
    local fresh, bad = {}, 0
    local ok, err = hashload.each(red, keys.breakers_index(), function(name, json)
        local c, perr
        if keys.valid_id(name) then
            c, perr = _M.parse(name, cjson.decode(json))
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

--- The loaded configs ({name = config}) as config_dict holds them.
function _M.loaded(cdict)
    local s = cdict:get(CDICT_KEY)
    local t = s and cjson.decode(s)
    return type(t) == "table" and t or {}
end

return _M
