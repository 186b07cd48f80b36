-- The request's headers in a caller-supplied table: what ngx.req.get_headers() returns, without
-- the table it creates per request and without its metamethod, which case-folds the name of
-- every header the request does not have (the request path looks up four such names per
-- request). Keys are nginx's lower-case header names; a repeated header becomes the list of its
-- values, as in get_headers. Reads through the FFI functions resty.core's get_headers uses.
local ffi = require("ffi")
local base = require("resty.core.base")
require("resty.core.request")   -- declares ngx_http_lua_ffi_req_get_headers{,_count}

local C = ffi.C
local ffi_str = ffi.string
local get_request = base.get_request
local type = type

local _M = {}

_M.MAX = 100
local buf = ffi.new("ngx_http_lua_ffi_table_elt_t[?]", _M.MAX)
local truncated = ffi.new("int[1]")

--- Fill the empty table t with the first MAX headers of the current request. Returns t.
function _M.read(t)
    local r = get_request()
    local n = C.ngx_http_lua_ffi_req_get_headers_count(r, _M.MAX, truncated)
    if n <= 0 or C.ngx_http_lua_ffi_req_get_headers(r, buf, n, 0) ~= 0 then
        return t
    end
    for i = 0, n - 1 do
        -- buf[i] indexed each time: a local reference to the element would be a cdata that
        -- the compiled loop materializes on its exit (24 bytes of garbage per request)
        local key = ffi_str(buf[i].key.data, buf[i].key.len)
        local value = ffi_str(buf[i].value.data, buf[i].value.len)
        local old = t[key]
        if old == nil then
            t[key] = value
        elseif type(old) == "table" then
            old[#old + 1] = value
        else
            t[key] = { old, value }
        end
    end
    return t
end

return _M
