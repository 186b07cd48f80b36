-- CRC16 of Redis Cluster (CCITT/XMODEM: polynomial 0x1021, initial value 0) and the hash slot of
-- a key: CRC16 of its hash tag (the text between the first "{" and the next "}", when not
-- empty) or of the whole key, modulo 16384. Pure Lua over LuaJIT's bit library.
local bit = require("bit")

local band, bxor, lshift, rshift = bit.band, bit.bxor, bit.lshift, bit.rshift
local byte = string.byte
local find = string.find

local _M = { SLOTS = 16384 }

local TABLE = {}
for i = 0, 255 do
    local crc = lshift(i, 8)
    for _ = 1, 8 do
        if band(crc, 0x8000) ~= 0 then
            crc = bxor(lshift(crc, 1), 0x1021)
        else
            crc = lshift(crc, 1)
        end
    end
    TABLE[i] = band(crc, 0xffff)
end

--- CRC16 of bytes i..j of s (whole string by default).
function _M.crc16(s, i, j)
    local crc = 0
    for k = i or 1, j or #s do
        crc = bxor(band(lshift(crc, 8), 0xffff), TABLE[bxor(rshift(crc, 8), byte(s, k))])
    end
    return crc
end

--- Hash slot (0..16383) of a key.
function _M.slot(key)
    local open = find(key, "{", 1, true)
    if open then
        local close = find(key, "}", open + 1, true)
        if close and close > open + 1 then
            return band(_M.crc16(key, open + 1, close - 1), 16383)
        end
    end
    return band(_M.crc16(key), 16383)
end

return _M
