-- tollgate.config.genpage: the page is shared with forked processes (the workers), a reload
-- finds the page it mapped before, and publishing leaves the page equal to the dict however two
-- writers interleave.
package.path = "lua/?.lua;t/lua/?.lua;" .. package.path
local ffi = require("ffi")
local fake_dict = require("fake_dict")
local genpage = require("tollgate.config.genpage")

pcall(ffi.cdef, [[
int fork(void);
int waitpid(int pid, int *status, int options);
void _exit(int status);
]])


describe("genpage", function()
    it("maps a page a forked process writes and its parent reads", function()
        local p = assert(genpage.create(fake_dict()))
        assert.are.equal(genpage.NONE, p[0])
        local pid = ffi.C.fork()
        assert.is_true(pid >= 0)
        if pid == 0 then
            p[0] = 42
            ffi.C._exit(0)
        end
        local status = ffi.new("int[1]")
        assert.are.equal(pid, ffi.C.waitpid(pid, status, 0))
        assert.are.equal(42, p[0])
    end)

    it("finds its own page again after a reload, maps a new one for another process", function()
        local d = fake_dict()
        local p1 = assert(genpage.create(d))
        p1[0] = 7
        local p2 = assert(genpage.create(d))
        assert.is_true(p1 == p2)
        assert.are.equal(7, p2[0])
        -- the dict of another master (e.g. left from before a binary upgrade): not this page
        d.v.genpage = d.v.genpage:gsub("^%d+", "1")
        local p3 = assert(genpage.create(d))
        assert.is_false(p1 == p3)
        assert.are.equal(genpage.NONE, p3[0])
    end)

    it("ends equal to the dict when a slower writer stores an older value last", function()
        local p = assert(genpage.create(fake_dict()))
        local gen = 5
        local calls = 0
        -- writer A reads 5; before it stores, writer B moves the dict to 6 and publishes
        local function get_a()
            calls = calls + 1
            if calls == 1 then
                local v = gen
                gen = 6
                genpage.publish(p, function() return gen end)
                assert.are.equal(6, p[0])
                return v
            end
            return gen
        end
        genpage.publish(p, get_a)
        assert.are.equal(6, p[0])
        assert.is_true(calls >= 3)     -- A stored 5, saw 6, stored 6 and checked again
    end)

    it("mirrors a missing generation as NONE and catches up when behind", function()
        local p = assert(genpage.create(fake_dict()))
        genpage.publish(p, function() return nil end)
        assert.are.equal(genpage.NONE, p[0])
        p[0] = 3
        genpage.check(p, function() return 4 end)
        assert.are.equal(4, p[0])
        genpage.publish(nil, function() error("no page: nothing to read") end)
    end)
end)
