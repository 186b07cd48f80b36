-- The config contract's corpus (testdata/config/, testdata/README.md) through the gateway's
-- checks (tollgate.config.contract): every valid app and connection limit accepted, every
-- invalid one refused with its field and reason — the cases the gateway can decide alone.
package.path = "lua/?.lua;./?.lua;" .. package.path
_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
local corpus = require("t.lua.corpus")
local contract = require("tollgate.config.contract")

-- decided by the whole config, not by one app's JSON: the control plane and the scripts
local STATEFUL = { unknown_cluster = true, over_allocation = true }

local function limits(c)
    local l = c.limits
    if c.scope == "cluster" then
        return contract.cluster_limits(l.max_connections, l.reserved_ratio)
    end
    return contract.app_limits(l.max_connections, l.burst_connections)
end

describe("config contract corpus", function()
    for _, c in ipairs(corpus.load("config/apps/valid.json")) do
        it("accepts the app: " .. c.name, function()
            assert.are.same({}, { contract.app(c.app) })
        end)
    end
    for _, c in ipairs(corpus.load("config/apps/invalid.json")) do
        if not STATEFUL[c.reason] then
            it("refuses the app: " .. c.name, function()
                assert.are.same({ c.field, c.reason }, { contract.app(c.app) })
            end)
        end
    end
    for _, c in ipairs(corpus.load("config/connections/valid.json")) do
        it("accepts the limits: " .. c.name, function()
            assert.are.same({}, { limits(c) })
        end)
    end
    for _, c in ipairs(corpus.load("config/connections/invalid.json")) do
        it("refuses the limits: " .. c.name, function()
            assert.are.same({ c.field, c.reason }, { limits(c) })
        end)
    end
end)
