-- The request's headers in a caller-supplied table: what ngx.req.get_headers() returns, without
-- the table it creates per request, without its metamethod (which case-folds the name of every
-- header the request does not have; the request path looks up four such names per request),
-- and without Lua strings for the headers nobody reads. read() takes only the names the
-- request path asked for with want(); all() adds the others when something needs arbitrary
-- headers (rules, events). An S3 request carries eight or more headers (authorization,
-- x-amz-date, x-amz-content-sha256, user-agent, ...) of which the limiter reads one or two.
-- Keys are nginx's lower-case header names; a repeated header becomes the list of its values,
-- as in get_headers. Reads through the FFI functions resty.core's get_headers uses, but takes
-- every header (get_headers stops at 100: a header a rule depends on, sent after 100 others,
-- would have let the request past the rule; nginx's header buffers bound how many there are).
local ffi = require("ffi")
local base = require("resty.core.base")
require("resty.core.request")   -- declares ngx_http_lua_ffi_req_get_headers{,_count} and
                                -- ngx_http_lua_ffi_req_get_querystring_len

local C = ffi.C
local ffi_str = ffi.string
local get_request = base.get_request
local tonumber = tonumber
local type = type
local lower = string.lower
local var = ngx.var

local _M = {}

_M.MAX = 100                    -- headers of the reused buffer; a request with more gets its own
local buf = ffi.new("ngx_http_lua_ffi_table_elt_t[?]", _M.MAX)
local truncated = ffi.new("int[1]")

local WANTED = {}               -- lower-case name -> true
local LEN_MAX = 64
local WANTED_LEN = {}           -- name length -> some wanted name has it (an array: 0..LEN_MAX)
for i = 0, LEN_MAX do
    WANTED_LEN[i] = false
end
local FULL = {}                 -- key of a table that holds every header

--- Make read() take header `name` (any case, at most 64 characters).
function _M.want(name)
    if #name > LEN_MAX then
        error("header name longer than " .. LEN_MAX .. ": " .. name, 2)
    end
    name = lower(name)
    WANTED[name] = true
    WANTED_LEN[#name] = true
end

local function add(t, key, value)
    local old = t[key]
    if old == nil then
        t[key] = value
    elseif type(old) == "table" then
        old[#old + 1] = value
    else
        t[key] = { old, value }
    end
end

local scan

-- wanted: true takes the wanted names only, false every other one
local function fill(t, wanted)
    local r = get_request()
    local n = C.ngx_http_lua_ffi_req_get_headers_count(r, 0, truncated)    -- 0: all of them
    if n <= 0 then
        return t
    end
    local b = buf
    if n > _M.MAX then
        b = ffi.new("ngx_http_lua_ffi_table_elt_t[?]", n)
    end
    if C.ngx_http_lua_ffi_req_get_headers(r, b, n, 0) ~= 0 then
        return t
    end
    return scan(t, b, n, wanted)
end

-- headers 0..n-1 of buffer b into t (wanted: as fill)
function scan(t, b, n, wanted)
    for i = 0, n - 1 do
        -- b[i] indexed each time: a local reference to the element would be a cdata that
        -- the compiled loop materializes on its exit (24 bytes of garbage per request)
        local len = tonumber(b[i].key.len)
        if not wanted or (len <= LEN_MAX and WANTED_LEN[len]) then
            local key = ffi_str(b[i].key.data, len)
            if (WANTED[key] == true) == wanted then
                add(t, key, ffi_str(b[i].value.data, b[i].value.len))
            end
        end
    end
    return t
end

-- header i of b into t if it is wanted
local function slot(t, b, i)
    local len = tonumber(b[i].key.len)
    if len <= LEN_MAX and WANTED_LEN[len] then
        local key = ffi_str(b[i].key.data, len)
        if WANTED[key] == true then
            add(t, key, ffi_str(b[i].value.data, b[i].value.len))
        end
    end
end

-- fill(t, true) of a request with 1..UNROLLED headers, as straight-line code compiled once:
--   slot(t, b, 0) if n == 1 then return t end slot(t, b, 1) if n == 2 then return t end ...
-- The loop over the headers was an inner loop of the access phase's trace: LuaJIT ends a root
-- trace at an inner loop, compiles the loop as a trace of its own and the rest of the phase as
-- side traces of it, and which of its starts it compiled or gave up on (an abort's retry waits
-- a randomised while) varied from run to run, and the cost of the phase with it. Unrolled, the
-- phase is one trace; each header count is a side exit of its own.
local UNROLLED = 32
local function compile_unrolled(n)
    local src = { "local slot = ...\nreturn function(t, b, n)" }
    for i = 0, n - 1 do
        src[#src + 1] = ("slot(t, b, %d) if n == %d then return t end"):format(i, i + 1)
    end
    src[#src + 1] = "return t\nend"
    return assert(loadstring(table.concat(src, "\n"), "=reqheaders.unrolled"))(slot)
end
local unrolled = compile_unrolled(UNROLLED)
_M.UNROLLED, _M.scan, _M.unrolled = UNROLLED, scan, unrolled     -- for t/lua/reqheaders_spec.lua

--- Fill the empty table t with the wanted headers of the current request. Returns t.
function _M.read(t)
    local r = get_request()
    local n = C.ngx_http_lua_ffi_req_get_headers_count(r, 0, truncated)    -- 0: all of them
    if n <= 0 or n > UNROLLED then
        return fill(t, true)
    end
    if C.ngx_http_lua_ffi_req_get_headers(r, buf, n, 0) ~= 0 then
        return t
    end
    return unrolled(t, buf, n)
end

--- The raw query string of the current request ($args), nil when it has none. Most object
-- requests have none: the length check costs a field read where reading $args costs a
-- variable lookup by name (~400 instructions).
function _M.query()
    if C.ngx_http_lua_ffi_req_get_querystring_len(get_request()) == 0 then
        return nil
    end
    return var.args
end

--- Add the other headers of the current request to t, filled by read() (once). Returns t.
function _M.all(t)
    if t[FULL] == nil then
        fill(t, false)
        t[FULL] = true
    end
    return t
end

return _M
