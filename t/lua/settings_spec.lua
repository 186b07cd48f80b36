-- Gateway settings (tollgate.settings): defaults, options over environment over defaults, and
-- every bad setting named in the one error that stops a start.
package.path = "lua/?.lua;" .. package.path
_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
ngx.shared = ngx.shared or {}
local config = require("tollgate.config.apps")
local settings = require("tollgate.settings")

local function env(t)
    return function(name) return t[name] end
end

describe("settings", function()
    it("takes every default without options or environment", function()
        local s, errs = settings.load({}, env({}))
        assert.same({}, errs)
        for _, e in ipairs(settings.SCHEMA) do
            if type(e.default) ~= "function" and e.kind ~= "cidrs" then
                assert.equals(e.default, s[e.key], e.key)
            end
        end
        assert.matches("^gw%-", s.node_id)
        assert.same({}, s.trusted_proxies)
    end)

    it("takes an option over the environment over the default", function()
        local s = settings.get({ report_interval = 0.5 }, env({ TOLLGATE_REPORT_INTERVAL = "2",
            TOLLGATE_CONN_APP_LIMIT = "7", TOLLGATE_EVENTS_PER_SEC = "" }))
        assert.equals(0.5, s.report_interval)
        assert.equals(7, s.conn_app_limit)
        assert.equals(20, s.events_per_sec)   -- an empty variable is unset
    end)

    for _, bad in ipairs({ 0, 0.05, 16, -1, "x" }) do
        it("refuses a report interval of " .. bad, function()
            local ok, err = pcall(config.settings, { node_id = "n1", report_interval = bad })
            assert.is_false(ok)
            assert.matches("report_interval (TOLLGATE_REPORT_INTERVAL)='" .. bad .. "' must be",
                err, 1, true)
        end)
    end

    it("names every bad setting at once, not only the first", function()
        local _, errs = settings.load({ events_per_sec = 1.5, jit_tune = "yes" }, env({
            TOLLGATE_NODE_ID = "a b", TOLLGATE_REDIS_TIMEOUT_MS = "101",
            TOLLGATE_TRUSTED_PROXIES = "10.0.0.0/8,nonsense", TOLLGATE_CONN_CLEANUP_BATCH = "0",
            TOLLGATE_LIMITER_MODE = "fast" }))
        local want = { "TOLLGATE_NODE_ID='a b'", "TOLLGATE_LIMITER_MODE='fast'",
            "TOLLGATE_REDIS_TIMEOUT_MS='101' must be > 0 and <= 100",
            "jit_tune (TOLLGATE_JIT_TUNE)='yes' must be one of on, off",
            "events_per_sec (TOLLGATE_EVENTS_PER_SEC)='1.5' must be an integer",
            "TOLLGATE_TRUSTED_PROXIES='10.0.0.0/8,nonsense' must be comma-separated CIDRs",
            "TOLLGATE_CONN_CLEANUP_BATCH='0' must be >= 1" }
        assert.equals(#want, #errs, table.concat(errs, "\n"))
        local all = table.concat(errs, "\n")
        for _, w in ipairs(want) do
            assert.truthy(all:find(w, 1, true), w .. " in:\n" .. all)
        end
        local ok, err = pcall(settings.get, { events_per_sec = 1.5 },
            env({ TOLLGATE_NODE_ID = "a b" }))
        assert.is_false(ok)
        assert.matches("TOLLGATE_NODE_ID='a b'", err, 1, true)
        assert.matches("events_per_sec (TOLLGATE_EVENTS_PER_SEC)='1.5'", err, 1, true)
    end)

    it("tunes the JIT unless told 'off'", function()
        assert.equals("on", config.settings({ node_id = "n1" }).jit_tune)
        assert.equals("off", config.settings({ node_id = "n1", jit_tune = "off" }).jit_tune)
    end)

    it("documents every entry", function()
        for _, e in ipairs(settings.SCHEMA) do
            assert.truthy(e.key and e.kind and e.doc, tostring(e.key))
            assert.truthy(e.env == nil or e.env:match("^TOLLGATE_[A-Z0-9_]+$"), e.key)
        end
    end)
end)
