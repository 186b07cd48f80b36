-- Gateway settings (tollgate.settings): defaults, options over environment over defaults, and
-- every bad setting named in the one error that stops a start.
package.path = "lua/?.lua;" .. package.path
_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
ngx.shared = ngx.shared or {}
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
            local ok, err = pcall(settings.get, { node_id = "n1", report_interval = bad })
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

    it("names the bad identity, S3, cost and Redis settings at once too", function()
        local _, errs = settings.load({}, env({
            TOLLGATE_APP_SOURCES = "header,cookie", TOLLGATE_S3_DOMAINS = "s3.example.com,bad..dom",
            TOLLGATE_COSTS = "GetObject=1,Teleport=3", TOLLGATE_APP_HEADER_FROM = "trusted",
            TOLLGATE_REDIS_URL = "redis://:hunter2@127.0.0.1/0",
            TOLLGATE_REPORT_INTERVAL = "99" }))
        local want = { "TOLLGATE_APP_SOURCES='header,cookie' names an unknown source 'cookie'",
            "TOLLGATE_S3_DOMAINS='s3.example.com,bad..dom' has a bad domain 'bad..dom'",
            "TOLLGATE_COSTS='GetObject=1,Teleport=3' is refused: unknown operation in cost table: "
                .. "Teleport",
            "TOLLGATE_APP_HEADER_FROM='trusted' needs TOLLGATE_TRUSTED_PROXIES",
            "TOLLGATE_REDIS_URL (value not shown) is refused: invalid redis url",
            "TOLLGATE_REPORT_INTERVAL='99' must be" }
        local all = table.concat(errs, "\n")
        assert.equals(#want, #errs, all)
        for _, w in ipairs(want) do
            assert.truthy(all:find(w, 1, true), w .. " in:\n" .. all)
        end
        assert.falsy(all:find("hunter2", 1, true), "the Redis password in: " .. all)
        -- each refused the same way on its own
        for _, bad in ipairs({ { TOLLGATE_APP_SOURCES = " , " },
                               { TOLLGATE_APP_SOURCES = "header,header" },
                               { TOLLGATE_COSTS = "GetObject" }, { TOLLGATE_COSTS = "LIST=x" },
                               { TOLLGATE_S3_DOMAINS = "-x.com" },
                               { TOLLGATE_REDIS_URL = "http://x:1" } }) do
            local _, e = settings.load({}, env(bad))
            assert.equals(1, #e, next(bad) .. ": " .. table.concat(e, "; "))
        end
        local _, e = settings.load({ costs = { Teleport = 1 } }, env({}))
        assert.equals(1, #e)
        assert.matches("unknown operation in cost table: Teleport", e[1], 1, true)
        -- good values pass
        local s, ok = settings.load({}, env({ TOLLGATE_APP_SOURCES = "var:app_id, header",
            TOLLGATE_S3_DOMAINS = "S3.Example.com", TOLLGATE_COSTS = "LIST=4, GetObject=2",
            TOLLGATE_APP_HEADER_FROM = "trusted", TOLLGATE_TRUSTED_PROXIES = "10.0.0.0/8",
            TOLLGATE_REDIS_URL = "redis-sentinel://a:26379,b:26379/mymaster/2" }))
        assert.same({}, ok)
        assert.equals("LIST=4, GetObject=2", s.cost_list)
    end)

    it("tunes the JIT unless told 'off'", function()
        assert.equals("on", settings.get({ node_id = "n1" }).jit_tune)
        assert.equals("off", settings.get({ node_id = "n1", jit_tune = "off" }).jit_tune)
    end)

    it("documents every entry", function()
        for _, e in ipairs(settings.SCHEMA) do
            assert.truthy(e.key and e.kind and e.doc, tostring(e.key))
            assert.truthy(e.env == nil or e.env:match("^TOLLGATE_[A-Z0-9_]+$"), e.key)
        end
    end)
end)
