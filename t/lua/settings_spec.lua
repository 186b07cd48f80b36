-- Gateway settings: defaults, options over environment, and the errors that stop a start.
package.path = "lua/?.lua;" .. package.path
_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
ngx.shared = ngx.shared or {}
local config = require("tollgate.config.apps")

describe("settings", function()
    it("reports every 5 s by default", function()
        assert.equals(5, config.settings({ node_id = "n1" }).report_interval)
    end)

    it("takes a report interval from the options", function()
        local s = config.settings({ node_id = "n1", report_interval = 0.5 })
        assert.equals(0.5, s.report_interval)
    end)

    for _, bad in ipairs({ 0, 0.05, 16, -1 }) do
        it("refuses a report interval of " .. bad, function()
            local ok, err = pcall(config.settings, { node_id = "n1", report_interval = bad })
            assert.is_false(ok)
            assert.matches("TOLLGATE_REPORT_INTERVAL must be a number of seconds in %[0.1, 15%]",
                err)
        end)
    end

    it("refuses events per second that are no integer", function()
        local ok, err = pcall(config.settings, { node_id = "n1", events_per_sec = 1.5 })
        assert.is_false(ok)
        assert.matches("TOLLGATE_EVENTS_PER_SEC must be an integer", err)
    end)

    it("keeps counters in the shared dicts unless told 'on', refuses anything else", function()
        assert.equals("off", config.settings({ node_id = "n1" }).shared_counters)
        assert.equals("on", config.settings({ node_id = "n1", shared_counters = "on" })
            .shared_counters)
        local ok, err = pcall(config.settings, { node_id = "n1", shared_counters = "yes" })
        assert.is_false(ok)
        assert.matches("TOLLGATE_SHARED_COUNTERS must be 'on' or 'off', got 'yes'", err)
    end)
end)
