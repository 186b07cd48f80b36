-- Breaker config checks (contract §3) of the gateway.
package.path = "lua/?.lua;" .. package.path
local bc = require("tollgate.breaker.config")

describe("breaker_config.parse", function()
    it("takes the contract's example values for absent fields", function()
        local c = assert(bc.parse("demo", {}))
        assert.are.same({ name = "demo", enabled = true, per_app = false, window_ms = 10000,
            min_requests = 10, failure_threshold = 5, failure_ratio = 0.5,
            open_timeout_ms = 30000, success_threshold = 3, half_open_max_inflight = 1,
            failure_statuses = { 500, 502, 503, 504 } }, c)
    end)

    it("keeps given values and ignores fields it does not use", function()
        local c = assert(bc.parse("b", { name = "b", per_app = true, enabled = false,
            failure_statuses = { 503 }, failure_ratio = 1, updated_by = "admin" }))
        assert.is_true(c.per_app)
        assert.is_false(c.enabled)
        assert.are.same({ 503 }, c.failure_statuses)
    end)

    it("rejects damaged configs, naming the field", function()
        local bad = {
            { { name = "other" }, "name" },
            { { per_app = "yes" }, "per_app" },
            { { window_ms = 50 }, "window_ms" },
            { { window_ms = 1000.5 }, "window_ms" },
            { { min_requests = 0 }, "min_requests" },
            { { failure_ratio = 0 }, "failure_ratio" },
            { { failure_ratio = 1.5 }, "failure_ratio" },
            { { success_threshold = "3" }, "success_threshold" },
            { { failure_statuses = { 99 } }, "failure_statuses" },
            { { failure_statuses = "500" }, "failure_statuses" },
        }
        for _, case in ipairs(bad) do
            local c, err = bc.parse("b", case[1])
            assert.is_nil(c)
            assert.truthy(err:find(case[2], 1, true), err)
        end
        assert.is_nil((bc.parse("b", "not a table")))
    end)
end)
