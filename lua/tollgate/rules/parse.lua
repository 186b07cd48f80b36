-- Rule JSON (docs/rules-contract.md §2) -> a checked, compiled rule table; and the load of
-- `ratelimit:rules` into config_dict by config.reload. Every field is checked: a rule that does not
-- parse is refused whole (the gateway keeps the last good copy of it). Pure Lua apart from load().
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local hashload = require("tollgate.config.hashload")
local values = require("tollgate.rules.values")
local glob = require("tollgate.rules.glob")

local type = type
local pairs = pairs
local next = next
local floor = math.floor
local find = string.find
local lower = string.lower
local sub = string.sub
local sort = table.sort
local null = cjson.null

local _M = {}

local SCOPES = { global = true, app = true, user = true, ip = true, endpoint = true }
local ALGORITHMS = { token_bucket = true, sliding_window = true, fixed_window = true }
local ACTIONS = { reject = true, throttle = true, shadow = true }
local UNITS = { requests = true, cost = true }
local DISTRIBUTIONS = { node = true, global = true }
local METHODS = { GET = true, HEAD = true, PUT = true, POST = true, DELETE = true, OPTIONS = true,
                  PATCH = true }

-- the bounds of the API (controlplane/internal/rules, rule.go), the contract's
local MAX_LIMIT = 1e12
local MAX_WINDOW = 86400
local MAX_DELAY_MS = 5000
local MAX_PRIORITY = 1000000
local MAX_DESCRIPTION = 512
local MAX_LIST = 100
local MAX_HEADERS = 20
local MAX_PATH = 512
local MAX_KEY_PREFIX = 1024
local MAX_HEADER_VALUE = 256

-- the JSON type of every field: what the API's strict decoding refuses as invalid_type
local TYPES = {
    id = "string", description = "string", scope = "string", user_key = "string",
    match = "object", algorithm = "string", limit = "integer", window_seconds = "integer",
    burst = "integer", unit = "string", distribution = "string", priority = "integer",
    enabled = "boolean", effective_from = "string", effective_to = "string", action = "string",
    throttle_max_delay_ms = "integer", created_at = "integer", updated_at = "integer",
    updated_by = "string",
}
local is_array, type_ok, printable = values.is_array, values.type_ok, values.printable
local is_header_name, cidr = values.is_header_name, values.cidr
_M.rfc3339 = values.rfc3339

local MATCH_TYPES = { app_ids = "strings", methods = "strings", bucket = "string",
                      key_prefix = "string", path = "string", cidrs = "strings", headers = "map" }

local function absent(v)
    return v == nil or v == null
end

local function int_in(v, lo, hi)
    return type(v) == "number" and v == floor(v) and v >= lo and v <= hi
end

-- A present list of strings: 1 to MAX_LIST entries, each passing check (field[i], code), none
-- twice (case-insensitive). Returns the set, or nil, field, code.
local function string_list(v, field, check, code)
    if #v == 0 then
        return nil, field, "empty_list"
    elseif #v > MAX_LIST then
        return nil, field, "too_many"
    end
    for i = 1, #v do
        if not check(v[i]) then
            return nil, field .. "[" .. (i - 1) .. "]", code
        end
    end
    local set, seen = {}, {}
    for i = 1, #v do
        if seen[lower(v[i])] then
            return nil, field, "duplicate"
        end
        seen[lower(v[i])] = true
        set[v[i]] = true
    end
    return set
end

-- what is wrong with a path glob (Go's globProblem), or nil
local function bad_glob(p)
    return sub(p, 1, 1) ~= "/" or #p > MAX_PATH or find(p, "[^\33-\126]") or find(p, "[?#]")
        or find(p, "***", 1, true)
end

local function parse_match(m, r)
    for k in pairs(m) do
        if not MATCH_TYPES[k] then
            return nil, "match." .. tostring(k), "unknown_field"
        end
    end
    for k, t in pairs(MATCH_TYPES) do
        if not absent(m[k]) and not type_ok(m[k], t) then
            return nil, "match." .. k, "invalid_type"
        end
    end
    local field, code
    if not absent(m.app_ids) then
        r.app_ids, field, code = string_list(m.app_ids, "match.app_ids", keys.valid_id,
            "invalid_app_id")
        if not r.app_ids then
            return nil, field, code
        end
    end
    if not absent(m.methods) then
        r.methods, field, code = string_list(m.methods, "match.methods",
            function(x) return METHODS[x] end, "invalid_method")
        if not r.methods then
            return nil, field, code
        end
    end
    if not absent(m.bucket) then
        if #m.bucket > 255 or not find(m.bucket, "^[%w%._%-]+$") then
            return nil, "match.bucket", "invalid_bucket"
        end
        r.bucket = m.bucket
    end
    if not absent(m.key_prefix) then
        if m.key_prefix == "" or not printable(m.key_prefix, MAX_KEY_PREFIX) then
            return nil, "match.key_prefix", "invalid_key_prefix"
        end
        r.key_prefix = m.key_prefix
    end
    if not absent(m.path) then
        if bad_glob(m.path) then
            return nil, "match.path", "invalid_path"
        end
        r.path, r.path_glob = m.path, glob.compile(m.path)     -- rules.glob: linear in the URI
    end
    if not absent(m.cidrs) then
        local _
        _, field, code = string_list(m.cidrs, "match.cidrs", cidr, "invalid_cidr")
        if field then
            return nil, field, code
        end
        r.cidrs = {}
        for i, c in ipairs(m.cidrs) do
            r.cidrs[i] = cidr(c)
        end
    end
    if not absent(m.headers) then
        local names = {}
        for k in pairs(m.headers) do
            names[#names + 1] = k
        end
        if #names == 0 then
            return nil, "match.headers", "empty_list"
        elseif #names > MAX_HEADERS then
            return nil, "match.headers", "too_many"
        end
        sort(names)
        local seen = {}
        r.headers = {}
        for _, k in ipairs(names) do
            if not is_header_name(k) then
                return nil, "match.headers", "invalid_header"
            elseif seen[lower(k)] then
                return nil, "match.headers", "duplicate"
            elseif not printable(m.headers[k], MAX_HEADER_VALUE) then
                return nil, "match.headers." .. k, "invalid_header"
            end
            seen[lower(k)] = true
            r.headers[#r.headers + 1] = { lower(k), m.headers[k] }
        end
    end
    if r.scope == "endpoint" and not (r.app_ids or r.methods or r.bucket or r.key_prefix or r.path
            or r.cidrs or r.headers) then
        return nil, "match", "endpoint_needs_match"
    end
    return true
end

-- An enumerated field: required (no default) or defaulted; nil, field, code when bad.
local function enum(c, f, allowed, default)
    local v = c[f]
    if absent(v) then
        if default == nil then
            return nil, f, "required"
        end
        return default
    end
    if not allowed[v] then
        return nil, f, "invalid_" .. f
    end
    return v
end

local function user_key(r, c)
    local uk = absent(c.user_key) and "" or c.user_key
    if r.scope ~= "user" then
        if uk ~= "" then
            return nil, "user_key", "user_key_not_allowed"
        end
        return true
    end
    if uk == "" then
        return nil, "user_key", "required"
    elseif uk == "s3_access_key" then
        r.user_s3 = true
    elseif sub(uk, 1, 7) == "header:" and is_header_name(sub(uk, 8)) then
        r.user_header = lower(sub(uk, 8))
    else
        return nil, "user_key", "invalid_user_key"
    end
    return true
end

local function numbers(r, c)
    if absent(c.limit) then
        return nil, "limit", "required"
    elseif not int_in(c.limit, 1, MAX_LIMIT) then
        return nil, "limit", "invalid_limit"
    end
    r.limit = c.limit
    if absent(c.window_seconds) then
        return nil, "window_seconds", "required"
    elseif not int_in(c.window_seconds, 1, MAX_WINDOW) then
        return nil, "window_seconds", "invalid_window"
    end
    r.window = c.window_seconds
    r.priority = absent(c.priority) and 100 or c.priority
    if not int_in(r.priority, 0, MAX_PRIORITY) then
        return nil, "priority", "invalid_priority"
    end
    if r.algorithm ~= "token_bucket" then
        if not absent(c.burst) then
            return nil, "burst", "burst_not_allowed"
        end
    elseif absent(c.burst) then
        r.burst = r.limit
    elseif not int_in(c.burst, 1, MAX_LIMIT) then
        return nil, "burst", "invalid_burst"
    else
        r.burst = c.burst
    end
    return true
end

local function times_and_action(r, c)
    for _, f in ipairs({ "effective_from", "effective_to" }) do
        if not absent(c[f]) then
            r[f] = _M.rfc3339(c[f])
            if not r[f] then
                return nil, f, "invalid_time"
            end
        end
    end
    if r.effective_from and r.effective_to and r.effective_from >= r.effective_to then
        return nil, "effective_to", "empty_interval"
    end
    local d = c.throttle_max_delay_ms
    if r.action == "throttle" then
        if absent(d) then
            return nil, "throttle_max_delay_ms", "required"
        elseif not int_in(d, 1, MAX_DELAY_MS) then
            return nil, "throttle_max_delay_ms", "invalid_throttle_delay"
        end
        r.max_delay = d / 1000
    elseif not absent(d) then
        return nil, "throttle_max_delay_ms", "throttle_delay_not_allowed"
    end
    return true
end

--- Check and compile one rule stored under id. Returns the rule table, or nil, field, reason
-- (the first bad field, with the API's field path and reason code; testdata/rules/ is the
-- corpus the gateway, the API and the console share).
function _M.parse(id, json)
    local c = type(json) == "string" and cjson.decode(json) or nil
    if type(c) ~= "table" or is_array(c) and next(c) ~= nil then
        return nil, "json", "invalid_json"
    end
    for f, t in pairs(TYPES) do
        if not absent(c[f]) and not type_ok(c[f], t) then
            return nil, f, "invalid_type"
        end
    end
    if absent(c.id) then
        return nil, "id", "required"
    elseif not keys.valid_id(c.id) then
        return nil, "id", "invalid_id"
    elseif c.id ~= id then
        return nil, "id", "id_mismatch"
    end
    if not absent(c.description) and not printable(c.description, MAX_DESCRIPTION) then
        return nil, "description", "invalid_description"
    end
    local r = { id = id, enabled = c.enabled ~= false }
    local field, code
    for _, e in ipairs({ { "scope", SCOPES }, { "algorithm", ALGORITHMS },
                         { "unit", UNITS, "requests" }, { "distribution", DISTRIBUTIONS, "node" },
                         { "action", ACTIONS, "reject" } }) do
        r[e[1]], field, code = enum(c, e[1], e[2], e[3])
        if not r[e[1]] then
            return nil, field, code
        end
    end
    for _, step in ipairs({ user_key, numbers, times_and_action }) do
        local ok
        ok, field, code = step(r, c)
        if not ok then
            return nil, field, code
        end
    end
    if not absent(c.match) then
        local ok
        ok, field, code = parse_match(c.match, r)
        if not ok then
            return nil, field, code
        end
    elseif r.scope == "endpoint" then
        return nil, "match", "endpoint_needs_match"
    end
    return r
end

local PREFIX = "rule:"

--- config.reload's part: HSCAN `ratelimit:rules` into config_dict ("rule:<id>" = JSON). A rule
-- that does not parse keeps its last good copy; returns the number of bad entries or nil, err.
function _M.load(red, cdict)
    local bad, err = hashload.into_dict(red, keys.rules_index(), cdict, PREFIX, "rule", _M.parse)
    if not bad then
        return nil, err
    end
    local ok, lerr = _M.list_ids(cdict)
    if not ok then
        return nil, lerr
    end
    return bad
end

--- Every stored rule of config_dict, parsed (bad ones cannot be stored; skipped anyway): the
-- rules the loader lists in "rule_ids" (no walk of the dict, which holds every app), or, from a
-- loader that wrote no list, those a walk finds.
function _M.stored(cdict)
    local out = {}
    local list = cdict:get("rule_ids")
    if list then
        for id in list:gmatch("%S+") do
            local json = cdict:get(PREFIX .. id)
            local r = json and _M.parse(id, json)
            if r then
                out[#out + 1] = r
            end
        end
        return out
    end
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

--- Write the list of stored rules ("rule_ids") from the ids the loader holds (worker 0, after
--- a load or a change of rules). Returns true or nil, err.
function _M.list_ids(cdict)
    local ids = {}
    for id in pairs(hashload.held(cdict, PREFIX)) do
        ids[#ids + 1] = id
    end
    local ok, err = cdict:safe_set("rule_ids", table.concat(ids, " "))
    if not ok then
        return nil, "config_dict: " .. tostring(err)
    end
    return true
end

return _M
