-- The histogram bucketer of tollgate.metrics: a binary search compiled into nested ifs must
-- give the index a linear scan of the upper bounds gives, on every bound, between bounds,
-- below the first and above the last.
package.path = "lua/?.lua;" .. package.path

_G.ngx = _G.ngx or {}
ngx.shared = ngx.shared or {}
ngx.shared.tollgate_metrics = ngx.shared.tollgate_metrics or {}
package.loaded["tollgate.metrics"] = nil
local metrics = require("tollgate.metrics")

local function linear(buckets, v)
    for i = 1, #buckets do
        if v <= buckets[i] then
            return i
        end
    end
    return #buckets + 1
end

describe("histogram bucketer", function()
    local lists = {
        metrics.COST_BUCKETS,
        { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 },
        { 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300 },
        { 7 },
        { 1, 2 },
    }
    for n, buckets in ipairs(lists) do
        it("matches a linear scan (list " .. n .. ", " .. #buckets .. " bounds)", function()
            local index = metrics.bucketer(buckets)
            local probes = { -1, 0, buckets[#buckets] * 10, 1e300 }
            for i, b in ipairs(buckets) do
                probes[#probes + 1] = b
                probes[#probes + 1] = b * (1 - 1e-9)
                probes[#probes + 1] = b * (1 + 1e-9)
                if i > 1 then
                    probes[#probes + 1] = (b + buckets[i - 1]) / 2
                end
            end
            for _, v in ipairs(probes) do
                assert.are.equal(linear(buckets, v), index(v), "v = " .. v)
            end
        end)
    end
end)
