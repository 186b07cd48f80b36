-- The value checks of the rule JSON (tollgate.rules.parse), each as the API's validator
-- (controlplane/internal/rules) reads it: JSON types, printable text, RFC 3339 times,
-- header names and CIDRs. Pure Lua.
local ipmatch = require("tollgate.request.ipmatch")

local type = type
local pairs = pairs
local next = next
local tonumber = tonumber
local floor = math.floor
local byte = string.byte
local find = string.find
local match = string.match

local _M = {}

--- Is v a JSON array (a table with keys 1..n only; an empty table counts)?
function _M.is_array(v)
    if type(v) ~= "table" then
        return false
    end
    local n = 0
    for _ in pairs(v) do
        n = n + 1
    end
    return n == #v
end

--- Does v have JSON type t: "string", "boolean", "integer", "object", "strings" (a list of
-- strings) or "map" (an object of strings)?
function _M.type_ok(v, t)
    if t == "integer" then
        return type(v) == "number" and v == floor(v) and v > -2 ^ 63 and v < 2 ^ 63
    elseif t == "object" then
        return type(v) == "table" and (next(v) == nil or not _M.is_array(v))
    elseif t == "strings" then
        if not _M.is_array(v) then
            return false
        end
        for i = 1, #v do
            if type(v[i]) ~= "string" then
                return false
            end
        end
        return true
    elseif t == "map" then
        if type(v) ~= "table" or (next(v) ~= nil and _M.is_array(v)) then
            return false
        end
        for _, x in pairs(v) do
            if type(x) ~= "string" then
                return false
            end
        end
        return true
    end
    return type(v) == t
end

--- Valid UTF-8 without control characters (C0, DEL, C1), at most max bytes.
function _M.printable(s, max)
    if #s > max or find(s, "[%z\1-\31\127]") or find(s, "\194[\128-\159]") then
        return false
    end
    local i, n = 1, #s
    while i <= n do
        local c = byte(s, i)
        local len = c < 0x80 and 1 or (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF)
            and 3 or (c >= 0xF0 and c <= 0xF4) and 4 or 0
        if len == 0 or i + len - 1 > n then
            return false
        end
        for j = i + 1, i + len - 1 do
            local b = byte(s, j)
            if b < 0x80 or b > 0xBF then
                return false
            end
        end
        i = i + len
    end
    return true
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

local MONTH_DAYS = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }

--- Unix seconds of an RFC 3339 timestamp ("2026-11-21T00:00:00Z", "...T08:00:00.5+08:00"), as
-- Go's time.Parse(time.RFC3339) reads it.
function _M.rfc3339(s)
    if type(s) ~= "string" or #s > 64 then
        return nil
    end
    local y, mo, d, h, mi, sec, frac, zone = match(s,
        "^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)(%.?%d*)(.*)$")
    if not y then
        return nil
    end
    y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi),
        tonumber(sec)
    if mo < 1 or mo > 12 or d < 1 or d > MONTH_DAYS[mo] or h > 23 or mi > 59 or sec > 59
            or (mo == 2 and d == 29 and (y % 4 ~= 0 or (y % 100 == 0 and y % 400 ~= 0))) then
        return nil
    end
    if frac == "." then
        return nil
    elseif frac ~= "" then
        sec = sec + tonumber("0" .. frac)
    end
    local off = 0
    if zone ~= "Z" then
        local sign, zh, zm = match(zone, "^([+-])(%d%d):(%d%d)$")
        if not sign or tonumber(zh) > 23 or tonumber(zm) > 59 then
            return nil
        end
        off = (tonumber(zh) * 60 + tonumber(zm)) * 60
        if sign == "-" then
            off = -off
        end
    end
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off
end

--- A header name as the contract takes it: 1-128 of A-Z a-z 0-9 - _.
function _M.is_header_name(s)
    return #s >= 1 and #s <= 128 and find(s, "^[%w%-_]+$") ~= nil
end

--- A CIDR as Go's netip.ParsePrefix reads it, with no host bit set; nil when not.
function _M.cidr(s)
    if #s > 64 or not find(s, "/%d+$") then
        return nil
    end
    local c = ipmatch.parse_cidr(s)
    if not c then
        return nil
    end
    local full, rest = floor(c.bits / 8), c.bits % 8
    for i = full + 1, #c.addr do
        local host_bits = i == full + 1 and 8 - rest or 8
        if byte(c.addr, i) % 2 ^ host_bits ~= 0 then
            return nil
        end
    end
    return c
end

return _M
