-- CRC16 and hash slots of Redis Cluster against known vectors (slots from CLUSTER KEYSLOT of
-- redis-server 7.0).
package.path = "lua/?.lua;" .. package.path
local crc16 = require("tollgate.redis.crc16")
local keys = require("tollgate.keys")

describe("crc16", function()
    it("matches the CCITT/XMODEM check value", function()
        assert.are.equal(0x31C3, crc16.crc16("123456789"))
        assert.are.equal(0, crc16.crc16(""))
    end)

    it("computes CRC16 of a substring", function()
        assert.are.equal(0x31C3, crc16.crc16("xx123456789yy", 3, 11))
    end)
end)

describe("slot", function()
    it("matches CLUSTER KEYSLOT", function()
        local want = {
            ["foo"] = 12182,
            ["123456789"] = 12739,
            [""] = 0,
            ["ratelimit:apps"] = 14207,
            ["ratelimit:config:version"] = 639,
            ["ratelimit:gateways"] = 2660,
            ["ratelimit:config:update"] = 5332,
        }
        for k, slot in pairs(want) do
            assert.are.equal(slot, crc16.slot(k), k)
        end
    end)

    it("hashes only the first non-empty hash tag", function()
        assert.are.equal(8363, crc16.slot("foo{}{bar}"))     -- empty tag: whole key
        assert.are.equal(4015, crc16.slot("foo{{bar}}zap"))  -- tag is "{bar"
        assert.are.equal(5061, crc16.slot("foo{bar}{zap}"))  -- tag is "bar"
        assert.are.equal(9500, crc16.slot("{}foo"))
        assert.are.equal(13340, crc16.slot("a{b"))           -- no closing brace
    end)

    it("puts every key of a cluster in the slot of its tag", function()
        assert.are.equal(5718, crc16.slot("{default}"))
        assert.are.equal(5718, crc16.slot(keys.l1("default")))
        assert.are.equal(5718, crc16.slot(keys.l1_apps("default")))
        assert.are.equal(5718, crc16.slot(keys.l2("default", "demo-p0")))
        assert.are.equal(5718, crc16.slot(keys.leases("default", "demo-p0")))
        assert.are.equal(5718, crc16.slot(keys.stats("default", "demo-p0")))
        assert.are.equal(5718, crc16.slot(keys.nodes("default", "demo-p3")))
        assert.are.equal(14347, crc16.slot(keys.l1("c1")))
        assert.are.equal(2152, crc16.slot(keys.l1("c2")))
    end)
end)
