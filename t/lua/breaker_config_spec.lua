-- Breaker config checks (docs/rules-contract.md §3) of the gateway.
package.path = "lua/?.lua;./?.lua;" .. package.path
local corpus = require("t.lua.corpus")
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

    -- the conformance corpus the API and the console run too (testdata/README.md)
    for _, c in ipairs(corpus.load("breakers/valid.json")) do
        it("accepts the corpus config: " .. c.name, function()
            local b, field, reason = bc.parse(c.breaker, c.config)
            assert.is_table(b, tostring(field) .. " " .. tostring(reason))
        end)
    end
    for _, c in ipairs(corpus.load("breakers/invalid.json")) do
        it("refuses the corpus config: " .. c.name, function()
            local b, field, reason = bc.parse(c.breaker, c.config)
            assert.is_nil(b)
            assert.are.same({ c.field, c.reason }, { field, reason })
        end)
    end

    it("refuses an entry that is no object", function()
        assert.are.same({ nil, "json", "invalid_json" }, { bc.parse("b", "not a table") })
    end)
end)
