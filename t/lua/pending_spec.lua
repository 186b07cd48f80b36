-- The packed pending counter of the lease (tollgate.shm): cost and request count of admissions
-- in one number, rollbacks, spilling before the packing would lose precision, and reports
-- taking everything. The dict here is an in-memory stand-in with the incr/get semantics of
-- ngx.shared.DICT (the real dict runs under nginx in t/lease_test.go).
package.path = "lua/?.lua;t/lua/?.lua;" .. package.path

local fake = require("fake_dict")()

_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
ngx.shared = ngx.shared or {}
ngx.shared.ratelimit = fake
package.loaded["tollgate.shm"] = nil
local shm = require("tollgate.shm")

local k = { pending = "p", pending_cost = "pc", pending_count = "pn" }

describe("packed pending consumption", function()
    before_each(function() fake.v = {} end)

    it("counts admissions and rollbacks exactly", function()
        assert.equals(1, shm.add_pending(k, 7, 1))
        assert.equals(2, shm.add_pending(k, 1000000, 1))
        assert.equals(1, shm.add_pending(k, -7, -1))
        assert.same({ 1000000, 1 }, { shm.peek_pending(k) })
    end)

    it("reads a negative count and cost after a report (rollback of a reported request)", function()
        shm.add_pending(k, -5, -1)
        assert.same({ -5, -1 }, { shm.peek_pending(k) })
        assert.same({ -5, -1 }, { shm.take_pending(k) })
        assert.same({ 0, 0 }, { shm.peek_pending(k) })
    end)

    for _, case in ipairs({ { 3, 2 }, { -3, 2 }, { 3, -2 }, { -3, -2 }, { 0, 0 },
                            { 2 ^ 33 - 1, 0 }, { -(2 ^ 33), 524287 }, { 12345, -524288 } }) do
        it("unpacks cost " .. case[1] .. " count " .. case[2], function()
            local p = case[1] * shm.PACK + case[2]
            assert.same(case, { shm.unpack_pending(p) })
        end)
    end

    it("spills into the plain counters before the count part leaves its range", function()
        fake.v.p = 262143 + 9 * shm.PACK      -- 262143 requests of total cost 9 pending
        local n = shm.add_pending(k, 4, 1)
        assert.equals(262144, n)
        assert.equals(0, fake.v.p)
        assert.same({ 13, 262144 }, { shm.peek_pending(k) })
        assert.equals(262145, shm.add_pending(k, 1, 1) + fake.v.pn)
        assert.same({ 14, 262145 }, { shm.take_pending(k) })
        assert.same({ 0, 0 }, { shm.peek_pending(k) })
    end)

    it("spills a cost part of 2^30 and keeps it exact", function()
        fake.v.p = (2 ^ 30 - 1) * shm.PACK + 3
        shm.add_pending(k, 1, 1)
        assert.equals(0, fake.v.p)
        assert.same({ 2 ^ 30, 4 }, { shm.take_pending(k) })
    end)

    it("leaves concurrent admissions in the packed counter when it spills", function()
        fake.v.p = 262143 * 1 + 262143 * shm.PACK
        local p_seen = shm.add_pending(k, 1, 1)
        assert.equals(262144, p_seen)
        -- another worker's admission after the spill lands in the packed counter again
        shm.add_pending(k, 2, 1)
        assert.same({ 262146, 262145 }, { shm.take_pending(k) })
    end)

    it("takes post-hoc charges with the admissions", function()
        shm.add_pending(k, 5, 1)
        fake:incr("pc", 100, 0)
        assert.same({ 105, 1 }, { shm.take_pending(k) })
        assert.same({ 0, 0 }, { shm.take_pending(k) })
    end)
end)
