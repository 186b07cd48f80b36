-- tollgate.shm.LAYOUT, the one table of every shared dict's keys, names exactly the dicts the
-- nginx include declares and /metrics reports, and modules that exist.
package.path = "lua/?.lua;" .. package.path
_G.ngx = _G.ngx or {}
ngx.shared = ngx.shared or {}
local shm = require("tollgate.shm")

local function read(path)
    local f = assert(io.open(path))
    local s = f:read("*a")
    f:close()
    return s
end

local function sorted(t)
    local out = {}
    for k in pairs(t) do
        out[#out + 1] = k
    end
    table.sort(out)
    return out
end

describe("the shared dicts' layout", function()
    it("names every dict of nginx/tollgate_http.conf, and no other", function()
        local declared = {}
        for name in read("nginx/tollgate_http.conf"):gmatch("\nlua_shared_dict%s+([%w_]+)") do
            declared[name] = true
        end
        assert.same(sorted(declared), sorted(shm.LAYOUT))
    end)

    it("names the zones /metrics reports", function()
        local list = read("lua/tollgate/metrics.lua"):match("local ZONES = (%b{})")
        local zones = {}
        for name in list:gmatch('"([%w_]+)"') do
            zones[name] = true
        end
        assert.same(sorted(zones), sorted(shm.LAYOUT))
    end)

    it("gives each key a meaning and a module that exists", function()
        for name, keys in pairs(shm.LAYOUT) do
            assert.truthy(#keys > 0, name)
            for _, k in ipairs(keys) do
                assert.truthy(k[1] ~= "" and k[2] ~= "", name)
                local path = "lua/" .. k[3]:gsub("%.", "/") .. ".lua"
                assert.truthy(io.open(path), name .. " " .. k[1] .. ": no " .. path)
            end
        end
    end)
end)
