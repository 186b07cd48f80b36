-- IP addresses and CIDR blocks (IPv4 and IPv6) for rule matching and trusted proxies
-- (docs/rules-contract.md §4). Addresses are binary strings: 4 bytes for IPv4 (IPv4-mapped IPv6
-- addresses such as ::ffff:10.0.0.1 become IPv4), 16 for IPv6. Pure Lua (runs under busted too).
local bit = require("bit")

local band = bit.band
local lshift = bit.lshift
local rshift = bit.rshift
local byte = string.byte
local char = string.char
local sub = string.sub
local find = string.find
local match = string.match
local gmatch = string.gmatch
local tonumber = tonumber
local concat = table.concat

local _M = {}

local function parse4(s)
    local a, b, c, d = match(s, "^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if not a then
        return nil
    end
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if a > 255 or b > 255 or c > 255 or d > 255 then
        return nil
    end
    return char(a, b, c, d)
end

-- groups of "h:h:h" (possibly empty) -> list of 16-bit numbers, or nil
local function groups(s, out)
    if s == "" then
        return out
    end
    for g in gmatch(s .. ":", "([^:]*):") do
        if not find(g, "^%x%x?%x?%x?$") then
            return nil
        end
        out[#out + 1] = tonumber(g, 16)
    end
    return out
end

local function parse6(s)
    if find(s, "%%") then
        s = match(s, "^([^%%]+)%%") -- zone index (fe80::1%eth0)
    end
    local tail4
    local head, v4 = match(s, "^(.*:)(%d+%.%d+%.%d+%.%d+)$")
    if head then
        tail4 = parse4(v4)
        if not tail4 then
            return nil
        end
        s = head .. "0:0"       -- placeholder groups replaced below
    end
    local left, right = match(s, "^(.-)::(.*)$")
    local g
    if left then
        if find(right, "::", 1, true) then
            return nil
        end
        local l = groups(left, {})
        local r = l and groups(right, {})
        if not r or #l + #r > 7 then
            return nil
        end
        g = l
        for _ = 1, 8 - #l - #r do
            g[#g + 1] = 0
        end
        for i = 1, #r do
            g[#g + 1] = r[i]
        end
    else
        g = groups(s, {})
        if not g or #g ~= 8 then
            return nil
        end
    end
    local b = {}
    for i = 1, 8 do
        b[2 * i - 1] = rshift(g[i], 8)
        b[2 * i] = band(g[i], 255)
    end
    local addr = char(unpack(b))
    if tail4 then
        addr = sub(addr, 1, 12) .. tail4
    end
    -- ::ffff:a.b.c.d is an IPv4 client on a dual-stack socket
    if sub(addr, 1, 12) == "\0\0\0\0\0\0\0\0\0\0\255\255" then
        return sub(addr, 13)
    end
    return addr
end

--- Binary form of an address string, or nil when it is not an IPv4 or IPv6 address.
function _M.parse(s)
    if type(s) ~= "string" or #s > 64 then
        return nil
    end
    if find(s, ":", 1, true) then
        return parse6(s)
    end
    return parse4(s)
end

--- A CIDR block {addr, bits} from "a.b.c.d/n", "h::h/n" or a bare address; nil, err if bad.
function _M.parse_cidr(s)
    if type(s) ~= "string" then
        return nil, "not a string"
    end
    local a, n = match(s, "^([^/]+)/(%d+)$")
    if not a then
        a = s
    end
    local addr = _M.parse(a)
    if not addr then
        return nil, "invalid address in '" .. s .. "'"
    end
    local max = #addr * 8
    local bits = n and tonumber(n) or max
    if find(a, ":", 1, true) and #addr == 4 then
        -- ::ffff:0:0/96 style: the prefix counted the 96 mapped bits
        bits = bits - 96
        if bits < 0 then
            return nil, "prefix of '" .. s .. "' is shorter than the IPv4-mapped range"
        end
    end
    if bits > max then
        return nil, "prefix length of '" .. s .. "' exceeds " .. max
    end
    return { addr = addr, bits = bits }
end

--- Does binary address `addr` lie inside block c?
local function contains(c, addr)
    if #addr ~= #c.addr then
        return false
    end
    local full = rshift(c.bits, 3)
    if full > 0 and sub(addr, 1, full) ~= sub(c.addr, 1, full) then
        return false
    end
    local rest = band(c.bits, 7)
    if rest == 0 then
        return true
    end
    local mask = band(lshift(0xff, 8 - rest), 0xff)
    return band(byte(addr, full + 1), mask) == band(byte(c.addr, full + 1), mask)
end
_M.contains = contains

--- Does binary address `addr` lie inside one of the blocks of list?
function _M.any(list, addr)
    for i = 1, #list do
        if contains(list[i], addr) then
            return true
        end
    end
    return false
end

--- Parse "cidr,cidr,..." (spaces allowed); returns a list (possibly empty) or nil, err.
function _M.parse_list(s)
    local list = {}
    if s == nil then
        return list
    end
    for item in gmatch(s, "[^,]+") do
        item = match(item, "^%s*(.-)%s*$")
        if item ~= "" then
            local c, err = _M.parse_cidr(item)
            if not c then
                return nil, err
            end
            list[#list + 1] = c
        end
    end
    return list
end

--- The client address (string) of a request: remote_addr unless it is a trusted proxy; then
-- X-Forwarded-For (a string or a list of header lines) walked from the right, skipping
-- trusted addresses; the first untrusted one is the client. When every hop is trusted, the
-- leftmost one is the client. Returns the address string and its binary form.
function _M.client(remote, xff, trusted)
    local bin = _M.parse(remote)
    if #trusted == 0 or not bin or not _M.any(trusted, bin) or xff == nil then
        return remote, bin
    end
    if type(xff) == "table" then
        xff = concat(xff, ",")
    end
    local hops = {}
    for item in gmatch(xff, "[^,]+") do
        hops[#hops + 1] = match(item, "^%s*(.-)%s*$")
    end
    local last, last_bin = remote, bin
    for i = #hops, 1, -1 do
        local h = hops[i]
        local hb = _M.parse(h)
        if not hb then
            -- garbage in the header: the last trusted hop is the best we know
            return last, last_bin
        end
        last, last_bin = h, hb
        if not _M.any(trusted, hb) then
            return h, hb
        end
    end
    return last, last_bin
end

return _M
