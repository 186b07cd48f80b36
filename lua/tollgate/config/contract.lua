-- The config contract on the gateway's side: what makes an app's config (the JSON of
-- ratelimit:apps) and its connection limits (connlimit:{c}:config:<app>, connlimit:{c}:cluster)
-- valid, with the field and reason code of the control plane's validator
-- (controlplane/internal/validate/contract.go). The corpus testdata/config/ holds the cases
-- both run (t/lua/config_contract_spec.lua); docs/config-contract.md states the rules.
-- Each check returns nil when valid, else field, reason. The cluster an app names and the
-- allocation cap depend on the whole config: the control plane and the scripts check those.
local keys = require("tollgate.keys")

local type = type
local byte = string.byte
local floor = math.floor
local null = require("cjson.safe").null

local _M = {}

local UNDERSCORE = byte("_")
local MAX = 9007199254740992    -- 2^53: integers beyond lose precision in Lua and the scripts

local function absent(v)
    return v == nil or v == null
end

-- an integer in [lo, MAX): nil when it is, else the reason ("invalid_type" for a non-integer)
local function int(v, lo, code)
    if type(v) ~= "number" or v ~= v or v ~= floor(v) or v == math.huge or v == -math.huge then
        return "invalid_type"
    end
    if v < lo or v >= MAX then
        return code
    end
    return nil
end

--- An app's config `c` (decoded JSON; `id`, when given, is its id when c has none).
function _M.app(c, id)
    local app_id = c.app_id
    if absent(app_id) then
        app_id = id
    end
    if absent(app_id) then
        return "app_id", "required"
    end
    if not keys.valid_id(app_id) then
        return "app_id", "invalid_id"
    end
    if byte(app_id, 1) == UNDERSCORE then
        return "app_id", "reserved_id"     -- the gateway's labels: _s3, _unknown, _invalid, ...
    end
    if absent(c.cluster_id) then
        return "cluster_id", "required"
    end
    if not keys.valid_id(c.cluster_id) then
        return "cluster_id", "invalid_id"
    end
    local g, b = c.guaranteed_quota, c.burst_quota
    if absent(g) then
        return "guaranteed_quota", "required"
    end
    local why = int(g, 1, "invalid_guaranteed_quota")
    if why then
        return "guaranteed_quota", why
    end
    if absent(b) then
        return "burst_quota", "required"
    end
    why = int(b, 1, "invalid_burst_quota")
    if why then
        return "burst_quota", why
    end
    if b < g then
        return "burst_quota", "burst_below_guaranteed"
    end
    if absent(c.priority) then
        return "priority", "required"
    end
    why = int(c.priority, 0, "invalid_priority")
    if why or c.priority > 3 then
        return "priority", why or "invalid_priority"
    end
    if not absent(c.c_bw) then
        why = int(c.c_bw, 0, "invalid_c_bw")
        if why then
            return "c_bw", why
        end
    end
    if not absent(c.max_borrow) then
        why = int(c.max_borrow, 0, "invalid_max_borrow")
        if why then
            return "max_borrow", why
        end
    end
    if not absent(c.enabled) and type(c.enabled) ~= "boolean" then
        return "enabled", "invalid_type"
    end
    if not absent(c.max_connections) or not absent(c.burst_connections) then
        local mb = c.burst_connections
        if absent(mb) then
            mb = nil
        end
        return _M.app_limits(not absent(c.max_connections) and c.max_connections or nil, mb)
    end
    return nil
end

--- An app's connection limits (burst nil: max).
function _M.app_limits(max, burst)
    if max == nil then
        return "max_connections", "required"
    end
    local why = int(max, 1, "invalid_max_connections")
    if why then
        return "max_connections", why
    end
    if burst == nil then
        return nil
    end
    why = int(burst, 1, "invalid_burst_connections")
    if why == "invalid_type" then
        return "burst_connections", why
    end
    if burst < max then
        return "burst_connections", "burst_below_max_connections"
    end
    if why then
        return "burst_connections", why
    end
    return nil
end

--- A cluster's connection limits (ratio nil: 0.1).
function _M.cluster_limits(max, ratio)
    if max == nil then
        return "max_connections", "required"
    end
    local why = int(max, 1, "invalid_max_connections")
    if why then
        return "max_connections", why
    end
    if ratio == nil then
        return nil
    end
    if type(ratio) ~= "number" or ratio ~= ratio then
        return "reserved_ratio", "invalid_type"
    end
    if ratio < 0 or ratio >= 1 then
        return "reserved_ratio", "invalid_reserved_ratio"
    end
    return nil
end

return _M
