-- The request state of tollgate.request.state: every tg_* field a module keeps on it is one of the
-- FIELDS its reset covers (a field missing there would carry one request's value into the
-- next request that reuses the pooled table), and the compiled reset sets each to false.
-- (Opening and taking states needs a request: t/*_test.go run them under nginx.)
package.path = "lua/?.lua;" .. package.path

package.loaded["resty.core.base"] = { get_request = function() return nil end }
package.loaded["resty.core.request"] = true
package.loaded["tollgate.request.state"] = nil
local reqstate = require("tollgate.request.state")

local function sources()
    local p = io.popen("find lua/tollgate -name '*.lua'")
    local files = {}
    for f in p:lines() do
        files[#files + 1] = f
    end
    p:close()
    return files
end

describe("request state", function()
    it("lists every ctx.tg_* field the modules use", function()
        local listed = {}
        for _, f in ipairs(reqstate.FIELDS) do
            listed[f] = true
        end
        local used, n = {}, 0
        for _, path in ipairs(sources()) do
            local fh = assert(io.open(path))
            local src = fh:read("*a")
            fh:close()
            for field in src:gmatch("ctx%.(tg_[%w_]+)") do
                if not used[field] then
                    used[field] = path
                    n = n + 1
                end
            end
        end
        assert.is_true(n >= 10, "the scan found the fields")
        for field, path in pairs(used) do
            assert.is_true(listed[field] == true, field .. " (" .. path .. ") is not in FIELDS")
        end
    end)

    it("resets every field to false and leaves other keys alone", function()
        local reset = reqstate.compile_reset({ "tg_a", "tg_b" })
        local t = { tg_a = 1, tg_b = { 2 }, h = "kept" }
        reset(t)
        assert.are.equal(false, t.tg_a)
        assert.are.equal(false, t.tg_b)
        assert.are.equal("kept", t.h)
    end)
end)
