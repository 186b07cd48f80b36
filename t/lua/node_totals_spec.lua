-- The node report's per-app totals (tollgate.metrics.node_totals, read by tollgate.heartbeat):
-- requests and refusals per app, and the app's body bytes in and out as ratelimit_bytes_total
-- counts them (the request path's own counters, flushed from the workers), 0 left out.
package.path = "lua/?.lua;t/lua/?.lua;" .. package.path

local fake_dict = require("fake_dict")

local function shared_dict()
    local d = fake_dict()
    d.lists = {}
    function d:add(k, v)
        if self.v[k] ~= nil then
            return false, "exists"
        end
        self.v[k] = v
        return true
    end
    function d:get_keys()
        local out = {}
        for k in pairs(self.v) do
            out[#out + 1] = k
        end
        return out
    end
    function d:rpush(k, v)
        local l = self.lists[k] or {}
        self.lists[k] = l
        l[#l + 1] = v
        return #l
    end
    function d:lpop(k)
        local l = self.lists[k]
        if not l or #l == 0 then
            return nil
        end
        return table.remove(l, 1)
    end
    return d
end

describe("node totals", function()
    local metrics, mdict

    before_each(function()
        mdict = shared_dict()
        _G.ngx = { shared = { tollgate_metrics = mdict }, worker = { id = function() return 0 end,
            count = function() return 1 end } }
        package.loaded["tollgate.metrics"] = nil
        metrics = require("tollgate.metrics")
    end)

    it("carries each app's bytes in and out as ratelimit_bytes_total counts them", function()
        metrics.request("up", "PUT", 200, 5)
        metrics.request("down", "GET", 200, 17)
        metrics.request("down", "GET", 429, nil)
        metrics.request("quiet", "HEAD", 200, 1)
        metrics.inc('ratelimit_bytes_total{app_id="up",direction="in"}', 3 * 1048576)
        metrics.inc('ratelimit_bytes_total{app_id="down",direction="out"}', 1000)
        metrics.inc('ratelimit_bytes_total{app_id="down",direction="out"}', 24)
        metrics.flush()
        local req, blk, apps = metrics.node_totals()
        assert.are.equal(4, req)
        assert.are.equal(1, blk)
        assert.are.same({ requests = 1, blocked = 0, bytes_in = 3 * 1048576 }, apps.up)
        assert.are.same({ requests = 2, blocked = 1, bytes_out = 1024 }, apps.down)
        assert.are.same({ requests = 1, blocked = 0 }, apps.quiet)
        -- cumulative: a later flush adds to the counts the report reads
        metrics.inc('ratelimit_bytes_total{app_id="down",direction="out"}', 76)
        metrics.inc('ratelimit_bytes_total{app_id="down",direction="in"}', 10)
        metrics.flush()
        apps = select(3, metrics.node_totals())
        assert.are.same({ requests = 2, blocked = 1, bytes_in = 10, bytes_out = 1100 }, apps.down)
    end)

    it("lists an app whose first download still runs, with the bytes it sent so far", function()
        metrics.flow('ratelimit_bytes_total{app_id="long",direction="out"}', "long", 65536)
        metrics.flow('ratelimit_bytes_total{app_id="long",direction="out"}', "long", 65536)
        metrics.flush()
        local _, _, apps = metrics.node_totals()
        assert.are.same({ requests = 0, blocked = 0, bytes_out = 131072 }, apps.long)
        -- its request ends: the log phase counts the rest and the request
        metrics.request("long", "GET", 200, 3)
        metrics.inc('ratelimit_bytes_total{app_id="long",direction="out"}', 100)
        metrics.flush()
        apps = select(3, metrics.node_totals())
        assert.are.same({ requests = 1, blocked = 0, bytes_out = 131172 }, apps.long)
    end)
end)
