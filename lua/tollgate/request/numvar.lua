-- Integer values of nginx variables (the response-header variables of
-- nginx/tollgate_location.conf) without a fresh Lua string per request. ngx.var.x = n makes a
-- string of n: interned (hashed and looked up) and, when the value changes from request to
-- request, garbage. Small integers (costs, connection counts) come from a cache of their
-- strings; larger ones (a lease's remaining tokens, which differ on every request) are written
-- as digits into a C buffer and handed to nginx through the FFI function resty.core's ngx.var
-- uses. Under callgrind with a lease of 200,000 tokens: -0.7k instructions per request.
local ffi = require("ffi")
local base = require("resty.core.base")
require("resty.core.var")       -- declares ngx_http_lua_ffi_var_set
local metrics = require("tollgate.metrics")

local C = ffi.C
local get_request = base.get_request
local var = ngx.var
local floor = math.floor
local tostring = tostring
local error = error

local _M = {}

local NUMSTR = {}
local NUMSTR_MAX = 65535
local NAME_MAX = 64             -- longest variable name set() takes
local DIGITS = 16               -- 2^53 has 16 digits
local digits = ffi.new("unsigned char[?]", DIGITS)
local lowcase = ffi.new("unsigned char[?]", NAME_MAX)
local ERRBUF = 256
local errbuf = ffi.new("unsigned char[?]", ERRBUF)
local errlen = ffi.new("size_t[1]")

--- v as a string, integers 0..NUMSTR_MAX from a cache.
-- (A value beyond the cache is not looked up in it: with a lease of 10^12 tokens that lookup
-- was an access LuaJIT does not compile, "NYI: mixed sparse/dense table", and the trace of the
-- whole request path aborted on every request.)
local function numstr(v)
    if v >= 0 and v <= NUMSTR_MAX then
        local s = NUMSTR[v]
        if s then
            return s
        end
        s = tostring(v)
        if v % 1 == 0 then
            NUMSTR[v] = s
        end
        return s
    end
    return tostring(v)
end
_M.numstr = numstr

-- writes the last digit of n at digits[i]; returns n without it
local function digit(n, i)
    local q = floor(n / 10)
    digits[i] = 48 + n - q * 10
    return q
end

-- the number of digits of an integer 1 <= n < 10^16: the histogram bucket of n among the bounds
-- 9, 99, ..., 10^15 - 1 (metrics' compiled binary search: no loop)
local bounds = {}
for k = 1, 15 do
    bounds[k] = 10 ^ k - 1
end
local ndigits = metrics.bucketer(bounds)

-- Writes integer n (NUMSTR_MAX < n < 2^53, or any integer 0 <= n < 2^53) into $name through
-- the FFI; returns nginx's code (0: set).
-- The digits are written without a loop, all sixteen of them: a loop here would be an inner loop
-- of the access phase's trace, and whether LuaJIT then compiles that trace at all depended on
-- the order in which it saw the two (under callgrind, one run in five ran the whole access phase
-- in the interpreter).
local function put(name, n)
    local len = ndigits(n)
    local m = digit(n, 15)
    m = digit(m, 14)
    m = digit(m, 13)
    m = digit(m, 12)
    m = digit(m, 11)
    m = digit(m, 10)
    m = digit(m, 9)
    m = digit(m, 8)
    m = digit(m, 7)
    m = digit(m, 6)
    m = digit(m, 5)
    m = digit(m, 4)
    m = digit(m, 3)
    m = digit(m, 2)
    m = digit(m, 1)
    digit(m, 0)
    errlen[0] = ERRBUF
    return C.ngx_http_lua_ffi_var_set(get_request(), name, #name, lowcase, digits + (DIGITS - len),
        len, errbuf, errlen)
end

--- ngx.var[name] = n (a number).
function _M.set(name, n)
    if n <= NUMSTR_MAX or n >= 2 ^ 53 or n % 1 ~= 0 then
        var[name] = numstr(n)       -- cached, or an odd value (negative, huge, fractional)
        return
    end
    if #name > NAME_MAX then
        error("variable name longer than " .. NAME_MAX .. ": " .. name, 2)
    end
    if put(name, n) ~= 0 then
        error("cannot set $" .. name .. ": " .. ffi.string(errbuf, errlen[0]), 2)
    end
end

local function set_string(name, v)
    var[name] = v
end

--- ngx.var[name] = n, or false (never an error) when nginx refuses it: a variable that nothing
-- in the configuration names has no place in the request, and nothing could read it.
function _M.try_set(name, n)
    if n < 0 or n >= 2 ^ 53 or n % 1 ~= 0 or #name > NAME_MAX then
        return (pcall(set_string, name, numstr(n)))
    end
    return put(name, n) == 0
end

return _M
