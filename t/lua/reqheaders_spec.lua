-- tollgate.request.headers: the straight-line reading of a request's headers (every count up to
-- UNROLLED) takes exactly what the loop takes — the wanted names, repeated ones as lists, in
-- the request's order. (Reading them from nginx needs a request: t/*_test.go run that.)
package.path = "lua/?.lua;" .. package.path

local ffi = require("ffi")
pcall(ffi.cdef, [[
typedef struct { int len; const unsigned char *data; } ngx_http_lua_ffi_str_t;
typedef struct { ngx_http_lua_ffi_str_t key; ngx_http_lua_ffi_str_t value; }
    ngx_http_lua_ffi_table_elt_t;
]])
package.loaded["resty.core.base"] = { get_request = function() return nil end }
package.loaded["resty.core.request"] = true
_G.ngx = _G.ngx or { var = {} }
package.loaded["tollgate.request.headers"] = nil
local reqheaders = require("tollgate.request.headers")

reqheaders.want("X-App-Id")
reqheaders.want("content-length")
reqheaders.want("range")

local keep = {}     -- the Lua strings the buffer points into

local function buffer(list)
    local b = ffi.new("ngx_http_lua_ffi_table_elt_t[?]", #list)
    for i, kv in ipairs(list) do
        keep[#keep + 1] = kv[1]
        keep[#keep + 1] = kv[2]
        b[i - 1].key.len, b[i - 1].key.data = #kv[1], kv[1]
        b[i - 1].value.len, b[i - 1].value.data = #kv[2], kv[2]
    end
    return b
end

local NAMES = { "host", "user-agent", "x-app-id", "content-length", "accept", "range", "x-amz-date",
                "authorization", "x-app-ids", "rangE" }

describe("request headers read in straight-line code", function()
    it("take what the loop takes, at every header count", function()
        math.randomseed(31)
        for n = 1, reqheaders.UNROLLED do
            for _ = 1, 20 do
                local list = {}
                for i = 1, n do
                    list[i] = { NAMES[math.random(#NAMES)], "v" .. i }
                end
                local b = buffer(list)
                local want = reqheaders.scan({}, b, n, true)
                local got = reqheaders.unrolled({}, b, n)
                assert.same(want, got)
            end
        end
    end)

    it("keep repeated headers as lists, in order, and skip the unwanted", function()
        local b = buffer({ { "x-app-id", "a" }, { "host", "h" }, { "x-app-id", "b" },
                           { "range", "bytes=0-1" }, { "x-app-id", "c" } })
        assert.same({ ["x-app-id"] = { "a", "b", "c" }, range = "bytes=0-1" },
            reqheaders.unrolled({}, b, 5))
    end)
end)
