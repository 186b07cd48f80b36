-- The Redis client's URL forms, and the cluster handle's routing (slots, MOVED, ASK, TRYAGAIN,
-- pipelines, connection hygiene) against scripted fake nodes: no nginx, no network.
package.path = "lua/?.lua;" .. package.path

local clock = 100
_G.ngx = {
    now = function() return clock end,
    update_time = function() end,
    sleep = function(s) clock = clock + s end,
    get_phase = function() return "timer" end,
    log = function() end,
    WARN = 5, NOTICE = 6, ERR = 4,
    null = setmetatable({}, { __tostring = function() return "null" end }),
    md5 = function(s) return "md5:" .. s end,
    shared = {},
    timer = { at = function() return true end, every = function() return true end },
}
local fake_lib = { new = function() error("no network in this spec") end }
package.loaded["resty.redis"] = fake_lib
package.loaded["nginx.redis"] = fake_lib

local rredis = require("tollgate.redis.client")
local crc16 = require("tollgate.redis.crc16")

describe("parse_url", function()
    it("reads the three forms", function()
        local u = assert(rredis.parse_url("redis://:pw@127.0.0.1:6390/2"))
        assert.are.same({ kind = "single", hosts = { { host = "127.0.0.1", port = 6390 } },
                          db = 2, password = "pw" }, u)
        u = assert(rredis.parse_url("redis-sentinel://a:26379,b:26380/mymaster/1"))
        assert.are.same({ kind = "sentinel", master_name = "mymaster", db = 1,
                          hosts = { { host = "a", port = 26379 }, { host = "b", port = 26380 } } },
                        u)
        u = assert(rredis.parse_url("redis-cluster://user:pw@a:7000,b:7001"))
        assert.are.same({ kind = "cluster", db = 0, user = "user", password = "pw",
                          hosts = { { host = "a", port = 7000 }, { host = "b", port = 7001 } } },
                        u)
        assert.are.equal("single", rredis.parse_url("h:1").kind)
    end)

    it("rejects malformed urls", function()
        for _, bad in ipairs({ "", "http://h:1", "redis://h", "redis://a:1,b:2",
                               "redis-sentinel://h:1", "redis-sentinel://h:1/",
                               "redis-sentinel://h/m", "redis-sentinel://h:1/m/x",
                               "redis-cluster://h:1/2", "redis-cluster://h:1,h2" }) do
            assert.is_nil(rredis.parse_url(bad), bad)
        end
    end)
end)

-- A fake cluster: owner[slot] is the master of a slot (default by range), migrating[slot] =
-- target while a slot's keys sit on the target, script[addr] = queued replies.
local function fake_cluster()
    local fc = { owner = {}, migrating = {}, script = {}, log = {}, conns = {} }
    local ranges = { { 0, 5460, "n1:1" }, { 5461, 10922, "n2:2" }, { 10923, 16383, "n3:3" } }
    function fc.master(slot)
        if fc.owner[slot] then
            return fc.owner[slot]
        end
        for _, r in ipairs(ranges) do
            if slot >= r[1] and slot <= r[2] then
                return r[3]
            end
        end
    end
    local function reply(conn, cmd, args)
        local addr = conn.addr
        fc.log[#fc.log + 1] = addr .. " " .. cmd
        local q = fc.script[addr]
        if q and #q > 0 then
            local r = table.remove(q, 1)
            return r[1], r[2]
        end
        if cmd == "cluster" then
            local out = {}
            for _, r in ipairs(ranges) do
                local h, p = r[3]:match("^(.*):(%d+)$")
                out[#out + 1] = { r[1], r[2], { h, tonumber(p), "id" } }
            end
            return out
        end
        local key = args[1]
        if cmd == "evalsha" or cmd == "eval" then
            key = args[2] > 0 and args[3] or nil
        end
        if key then
            local slot = crc16.slot(key)
            local asking = conn.asked
            conn.asked = false
            if fc.migrating[slot] == addr and asking then
                return cmd .. "@" .. addr
            end
            if fc.master(slot) ~= addr then
                return false, "MOVED " .. slot .. " " .. fc.master(slot)
            end
            if fc.migrating[slot] then
                return false, "ASK " .. slot .. " " .. fc.migrating[slot]
            end
        end
        return cmd .. "@" .. addr
    end
    local function conn_for(addr)
        local c = { addr = addr, closed = false, released = false, pipe = false, asked = false }
        local mt = {}
        mt.__index = function(_, cmd)
            return function(self, ...)
                if cmd == "close" then
                    self.closed = true
                    return 1
                elseif cmd == "asking" then
                    self.asked = true
                    return "OK"
                elseif cmd == "init_pipeline" then
                    self.pipe = {}
                    return
                elseif cmd == "commit_pipeline" then
                    local out = {}
                    for i, p in ipairs(self.pipe) do
                        local r, e = reply(self, p[1], p[2])
                        out[i] = r or { false, e }
                    end
                    self.pipe = false
                    return out
                elseif self.pipe then
                    self.pipe[#self.pipe + 1] = { cmd, { ... } }
                    return
                end
                return reply(self, cmd, { ... })
            end
        end
        setmetatable(c, mt)
        fc.conns[#fc.conns + 1] = c
        return c
    end
    local client = assert(rredis.new({ url = "redis-cluster://n1:1,n2:2,n3:3" }))
    client.connect_to = function(_, t)
        return conn_for(t.host .. ":" .. t.port)
    end
    client.release = function(_, red)
        red.released = true
    end
    fc.client = client
    return fc
end

local K_DEFAULT = "ratelimit:{default}:l1"     -- slot 5718: n2
local K_C1 = "ratelimit:{c1}:l1"               -- slot 14347: n3
local K_C2 = "ratelimit:{c2}:l1"               -- slot 2152: n1

local function with(fc, fn)
    return fc.client:with(100, fn)
end

describe("cluster handle", function()
    it("routes by the slot of the key, KEYS[1] for scripts", function()
        local fc = fake_cluster()
        local res = with(fc, function(red)
            return { red:get(K_DEFAULT), red:hget(K_C1, "f"), red:evalsha("sha", 2, K_C2, K_C1),
                     red:ping() }
        end)
        assert.are.equal("get@n2:2", res[1])
        assert.are.equal("hget@n3:3", res[2])
        assert.are.equal("evalsha@n1:1", res[3])
        assert.truthy(res[4]:match("^ping@n%d:%d$"))
        for _, c in ipairs(fc.conns) do
            assert.is_false(c.closed)
            assert.is_true(c.released)
        end
    end)

    it("follows MOVED and updates the slot map", function()
        local fc = fake_cluster()
        with(fc, function(red) return red:get(K_DEFAULT) end)   -- map loaded
        fc.owner[5718] = "n1:1"
        assert.are.equal("get@n1:1", with(fc, function(red) return red:get(K_DEFAULT) end))
        fc.log = {}
        assert.are.equal("set@n1:1", with(fc, function(red) return red:set(K_DEFAULT, 1) end))
        assert.are.same({ "n1:1 set" }, fc.log)           -- straight to the new master
    end)

    it("follows ASK with ASKING and keeps the slot map", function()
        local fc = fake_cluster()
        fc.migrating[5718] = "n1:1"
        assert.are.equal("evalsha@n1:1", with(fc, function(red)
            return red:evalsha("sha", 1, K_DEFAULT)
        end))
        fc.log = {}
        with(fc, function(red) return red:get(K_DEFAULT) end)
        assert.are.same({ "n2:2 get", "n1:1 get" }, fc.log)  -- still asks the source first
    end)

    it("retries TRYAGAIN within the deadline", function()
        local fc = fake_cluster()
        with(fc, function(red) return red:get(K_DEFAULT) end)
        fc.script["n2:2"] = { { false, "TRYAGAIN Multiple keys request during rehashing" } }
        assert.are.equal("get@n2:2", with(fc, function(red) return red:get(K_DEFAULT) end))
    end)

    it("closes a connection that answered READONLY or failed, never pools it", function()
        local fc = fake_cluster()
        with(fc, function(red) return red:get(K_DEFAULT) end)
        fc.conns = {}
        fc.script["n2:2"] = { { false, "READONLY You can't write against a read only replica." } }
        local res, err = with(fc, function(red) return red:set(K_DEFAULT, 1) end)
        assert.is_nil(res)
        assert.truthy(err:match("^READONLY"))
        assert.is_true(fc.conns[1].closed)
        assert.is_false(fc.conns[1].released)
        fc.conns = {}
        fc.script["n3:3"] = { { nil, "timeout" } }
        res, err = with(fc, function(red)
            local a = red:get(K_DEFAULT)
            local b, berr = red:get(K_C1)
            return b and a, berr
        end)
        assert.are.same({ nil, "timeout" }, { res, err })
        assert.is_true(fc.conns[1].released)     -- n2: answered fine
        assert.is_true(fc.conns[2].closed)       -- n3: timed out
        assert.is_false(fc.conns[2].released)
    end)

    it("splits a pipeline per node and keeps the order of the replies", function()
        local fc = fake_cluster()
        with(fc, function(red) return red:get(K_DEFAULT) end)
        fc.owner[14347] = "n1:1"                   -- c1 moved: n3 answers MOVED inside the pipeline
        local res = with(fc, function(red)
            red:init_pipeline()
            red:hmget(K_DEFAULT, "a")
            red:hmget(K_C1, "a")
            red:hset(K_C2, "a", 1)
            red:expire(K_DEFAULT, 10)
            return red:commit_pipeline()
        end)
        assert.are.same({ "hmget@n2:2", "hmget@n1:1", "hset@n1:1", "expire@n2:2" }, res)
    end)

    it("refuses commands it cannot route", function()
        local fc = fake_cluster()
        assert.has_error(function()
            with(fc, function(red) return red:multi() end)
        end)
    end)
end)
