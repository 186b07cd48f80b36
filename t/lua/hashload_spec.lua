-- tollgate.config.hashload: an HMGET of more fields than unpack takes at once is split into
-- chunks and answers every field in order.
package.path = "lua/?.lua;t/lua/?.lua;" .. package.path
local hashload = require("tollgate.config.hashload")

describe("hashload.hmget", function()
    it("answers 5,000 fields in order, in chunks of 1,000", function()
        local calls = 0
        local red = {
            hmget = function(_, key, ...)
                calls = calls + 1
                local n = select("#", ...)
                assert.is_true(n <= 1000)
                local out = {}
                for i = 1, n do
                    out[i] = key .. ":" .. select(i, ...)
                end
                return out
            end,
        }
        local fields = {}
        for i = 1, 5000 do
            fields[i] = "f" .. i
        end
        local vals = assert(hashload.hmget(red, "h", fields))
        assert.are.equal(5000, #vals)
        assert.are.equal("h:f1", vals[1])
        assert.are.equal("h:f5000", vals[5000])
        assert.are.equal(5, calls)
    end)

    it("returns the error of a failed chunk", function()
        local red = { hmget = function() return nil, "timeout" end }
        local vals, err = hashload.hmget(red, "h", { "a" })
        assert.is_nil(vals)
        assert.are.equal("timeout", err)
    end)
end)
