-- Key builders against the golden file shared with the Go control plane.
package.path = "lua/?.lua;" .. package.path
local keys = require("tollgate.keys")

describe("keys", function()
    it("match every line of testdata/keys.golden", function()
        local n = 0
        for line in io.lines("testdata/keys.golden") do
            if line ~= "" and line:sub(1, 1) ~= "#" then
                local lhs, want = line:match("^(.-) => (.+)$")
                assert.is_not_nil(lhs, "malformed golden line: " .. line)
                local parts = {}
                for w in lhs:gmatch("%S+") do
                    parts[#parts + 1] = w
                end
                local builder = keys[parts[1]]
                assert.is_function(builder, "no Lua builder for " .. parts[1])
                assert.are.equal(want, builder(unpack(parts, 2)))
                n = n + 1
            end
        end
        assert.is_true(n >= 12)
    end)

    it("validate ids", function()
        for _, ok in ipairs({ "a", "demo-p0", "A_b-9", string.rep("x", 128) }) do
            assert.is_true(keys.valid_id(ok), ok)
        end
        for _, bad in ipairs({ "", " ", "a b", "a:b", "a{b}", "../x", "é", "a\0b",
                               string.rep("x", 129), "a\n" }) do
            assert.is_false(keys.valid_id(bad), bad)
        end
        assert.is_false(keys.valid_id(nil))
        assert.is_false(keys.valid_id(42))
    end)
end)
