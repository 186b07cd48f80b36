-- Rule JSON (contract §2) -> a checked, compiled rule table; and the load of `ratelimit:rules`
-- into config_dict by config.reload. Every field is checked: a rule that does not parse is
-- refused whole (the gateway keeps the last good copy of it). Pure Lua apart from load().
local cjson = require("cjson.safe")
local ipmatch = require("tollgate.request.ipmatch")
local keys = require("tollgate.keys")
local hashload = require("tollgate.config.hashload")
local glob = require("tollgate.rules.glob")

local type = type
local floor = math.floor
local find = string.find
local match = string.match
local lower = string.lower
local sort = table.sort
local null = cjson.null

local _M = {}

local SCOPES = { global = true, app = true, user = true, ip = true, endpoint = true }
local ALGORITHMS = { token_bucket = true, sliding_window = true, fixed_window = true }
local ACTIONS = { reject = true, throttle = true, shadow = true }
local UNITS = { requests = true, cost = true }
local DISTRIBUTIONS = { node = true, global = true }
local MATCH_FIELDS = { app_ids = true, methods = true, bucket = true, key_prefix = true,
                       path = true, cidrs = true, headers = true }

local function absent(v)
    return v == nil or v == null
end

local function int_in(v, lo, hi)
    return type(v) == "number" and v == floor(v) and v >= lo and v <= hi
end

-- Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
local function days_from_civil(y, m, d)
    if m <= 2 then
        y = y - 1
    end
    local era = floor(y / 400)
    local yoe = y - era * 400
    local mp = (m + 9) % 12
    local doy = floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end

--- Unix seconds of an RFC 3339 timestamp ("2026-11-21T00:00:00Z", "...T08:00:00.5+08:00").
function _M.rfc3339(s)
    if type(s) ~= "string" then
        return nil
    end
    local y, mo, d, h, mi, sec, frac, zone = match(s,
        "^(%d%d%d%d)%-(%d%d)%-(%d%d)[Tt ](%d%d):(%d%d):(%d%d)(%.?%d*)(.*)$")
    if not y then
        return nil
    end
    y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi),
        tonumber(sec)
    if mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or sec > 60 then
        return nil
    end
    if frac ~= "" and frac ~= "." then
        sec = sec + tonumber("0" .. frac)
    elseif frac == "." then
        return nil
    end
    local off = 0
    if zone ~= "Z" and zone ~= "z" then
        local sign, zh, zm = match(zone, "^([+-])(%d%d):(%d%d)$")
        if not sign then
            return nil
        end
        off = (tonumber(zh) * 60 + tonumber(zm)) * 60
        if sign == "-" then
            off = -off
        end
    end
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off
end

local function string_list(v, check)
    if type(v) ~= "table" or #v == 0 or #v > 1000 then
        return nil
    end
    local set = {}
    for i = 1, #v do
        if type(v[i]) ~= "string" or (check and not check(v[i])) then
            return nil
        end
        set[v[i]] = true
    end
    return set
end

local function is_method(s) return find(s, "^[A-Z]+$") ~= nil and #s <= 16 end
local function is_header_name(s) return find(s, "^[%w%-_]+$") ~= nil and #s <= 128 end

local function parse_match(m, r)
    if absent(m) then
        return true
    end
    if type(m) ~= "table" then
        return nil, "match"
    end
    for k in pairs(m) do
        if not MATCH_FIELDS[k] then
            return nil, "match." .. tostring(k)
        end
    end
    if not absent(m.app_ids) then
        r.app_ids = string_list(m.app_ids, keys.valid_id)
        if not r.app_ids then
            return nil, "match.app_ids"
        end
    end
    if not absent(m.methods) then
        r.methods = string_list(m.methods, is_method)
        if not r.methods then
            return nil, "match.methods"
        end
    end
    for _, f in ipairs({ "bucket", "key_prefix", "path" }) do
        local v = m[f]
        if not absent(v) then
            if type(v) ~= "string" or v == "" or #v > 1024 or (f == "path" and v:sub(1, 1) ~= "/")
                    or (f == "bucket" and find(v, "/", 1, true)) then
                return nil, "match." .. f
            end
            r[f] = v
        end
    end
    if r.path then
        r.path_glob = glob.compile(r.path)     -- rules.glob: linear in the URI
    end
    if not absent(m.cidrs) then
        if not string_list(m.cidrs) then
            return nil, "match.cidrs"
        end
        r.cidrs = {}
        for i, c in ipairs(m.cidrs) do
            r.cidrs[i] = ipmatch.parse_cidr(c)
            if not r.cidrs[i] then
                return nil, "match.cidrs"
            end
        end
    end
    if not absent(m.headers) then
        if type(m.headers) ~= "table" or next(m.headers) == nil then
            return nil, "match.headers"
        end
        r.headers = {}
        for k, v in pairs(m.headers) do
            if type(k) ~= "string" or not is_header_name(k) or type(v) ~= "string" then
                return nil, "match.headers"
            end
            r.headers[#r.headers + 1] = { lower(k), v }
        end
        sort(r.headers, function(a, b) return a[1] < b[1] end)
    end
    return true
end

local function parse_time(r, c, f)
    if absent(c[f]) then
        return true
    end
    r[f] = _M.rfc3339(c[f])
    return r[f] ~= nil
end

--- Check and compile one rule. Returns the rule table or nil, field (the first bad field).
function _M.parse(id, json)
    local c = type(json) == "string" and cjson.decode(json) or nil
    if type(c) ~= "table" then
        return nil, "json"
    end
    if not keys.valid_id(id) or c.id ~= id then
        return nil, "id"
    end
    local r = { id = id }
    if not SCOPES[c.scope] then
        return nil, "scope"
    end
    r.scope = c.scope
    if r.scope == "user" then
        local uk = c.user_key
        if uk == "s3_access_key" then
            r.user_s3 = true
        elseif type(uk) == "string" and find(uk, "^header:") and is_header_name(uk:sub(8)) then
            r.user_header = lower(uk:sub(8))
        else
            return nil, "user_key"
        end
    elseif not absent(c.user_key) then
        return nil, "user_key"
    end
    local ok, field = parse_match(c.match, r)
    if not ok then
        return nil, field
    end
    if not ALGORITHMS[c.algorithm] then
        return nil, "algorithm"
    end
    r.algorithm = c.algorithm
    if type(c.limit) ~= "number" or c.limit < 1 or c.limit > 1e12 or c.limit ~= floor(c.limit) then
        return nil, "limit"
    end
    r.limit = c.limit
    if not int_in(c.window_seconds, 1, 86400) then
        return nil, "window_seconds"
    end
    r.window = c.window_seconds
    if r.algorithm == "token_bucket" then
        if absent(c.burst) then
            r.burst = r.limit
        elseif int_in(c.burst, 1, 1e12) then
            r.burst = c.burst
        else
            return nil, "burst"
        end
    elseif not absent(c.burst) then
        return nil, "burst"
    end
    r.unit = absent(c.unit) and "requests" or c.unit
    if not UNITS[r.unit] then
        return nil, "unit"
    end
    r.distribution = absent(c.distribution) and "node" or c.distribution
    if not DISTRIBUTIONS[r.distribution] then
        return nil, "distribution"
    end
    r.priority = absent(c.priority) and 100 or c.priority
    if not int_in(r.priority, -1e9, 1e9) then
        return nil, "priority"
    end
    if absent(c.enabled) then
        r.enabled = true
    elseif type(c.enabled) == "boolean" then
        r.enabled = c.enabled
    else
        return nil, "enabled"
    end
    if not parse_time(r, c, "effective_from") then
        return nil, "effective_from"
    end
    if not parse_time(r, c, "effective_to") then
        return nil, "effective_to"
    end
    r.action = absent(c.action) and "reject" or c.action
    if not ACTIONS[r.action] then
        return nil, "action"
    end
    if r.action == "throttle" then
        if not int_in(c.throttle_max_delay_ms, 1, 5000) then
            return nil, "throttle_max_delay_ms"
        end
        r.max_delay = c.throttle_max_delay_ms / 1000
    elseif not absent(c.throttle_max_delay_ms) then
        return nil, "throttle_max_delay_ms"
    end
    return r
end

local PREFIX = "rule:"

--- config.reload's part: HSCAN `ratelimit:rules` into config_dict ("rule:<id>" = JSON). A rule
-- that does not parse keeps its last good copy; returns the number of bad entries or nil, err.
function _M.load(red, cdict)
    return hashload.into_dict(red, keys.rules_index(), cdict, PREFIX, "rule", _M.parse)
end

--- Every stored rule of config_dict, parsed (bad ones cannot be stored; skipped anyway).
function _M.stored(cdict)
    local out = {}
    for _, k in ipairs(cdict:get_keys(0)) do
        if k:sub(1, #PREFIX) == PREFIX then
            local r = _M.parse(k:sub(#PREFIX + 1), cdict:get(k))
            if r then
                out[#out + 1] = r
            end
        end
    end
    return out
end

return _M
