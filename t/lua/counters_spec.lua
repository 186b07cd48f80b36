-- tollgate.counters: the semantics of a shared dict's get / incr / set for the hot path's
-- counters, kept in a memory area forked processes share and changed atomically; keys that do
-- not fit stay in their dict; a reload finds the area and its values again. The dicts here are
-- in-memory stand-ins with ngx.shared.DICT's semantics (one process: a forked child's registry
-- writes are not seen by its parent, so keys are registered before forking).
package.path = "lua/?.lua;t/lua/?.lua;" .. package.path
local ffi = require("ffi")
local fake_dict = require("fake_dict")

pcall(ffi.cdef, [[
int fork(void);
int waitpid(int pid, int *status, int options);
void _exit(int status);
int usleep(unsigned int usec);
]])


local phase = "init"
_G.ngx = { log = function() end, WARN = 4, ERR = 3, get_phase = function() return phase end,
           shared = {} }

-- a fresh module (a fresh master) over fresh dicts
local function fresh(capacity)
    ngx.shared.ratelimit = fake_dict()
    ngx.shared.tollgate_counters = fake_dict()
    package.loaded["tollgate.counters"] = nil
    local counters = require("tollgate.counters")
    counters.CAPACITY = capacity or counters.CAPACITY
    return counters
end

describe("counters", function()
    before_each(function() phase = "init" end)

    it("is the dict itself without an area", function()
        local counters = fresh()
        local ctr = counters.of("ratelimit")
        assert.is_false(counters.shared())
        assert.same({ nil, "not found" }, { ctr:incr("a", 1) })
        assert.equals(3, ctr:incr("a", 3, 0))
        assert.equals(3, ngx.shared.ratelimit.v.a)
        ctr:set("b", 9)
        assert.equals(9, ctr:get("b"))
    end)

    it("keeps values in the area with the dict's semantics", function()
        local counters = fresh()
        assert.is_true(counters.create())
        local ctr = counters.of("ratelimit")
        assert.is_nil(ctr:get("a"))
        assert.same({ nil, "not found" }, { ctr:incr("a", 1) })
        assert.equals(5, ctr:incr("a", 5, 0))
        assert.equals(-2, ctr:incr("a", -7))
        assert.equals(-2, ctr:get("a"))
        ctr:set("b", 2 ^ 52 + 1)
        assert.equals(2 ^ 52 + 1, ctr:get("b"))
        assert.is_nil(next(ngx.shared.ratelimit.v))     -- nothing went to the dict
        assert.has_error(function() ctr:incr("c", 1, 10) end, "counters: init must be 0 or nil")
        -- another dict's store: its own names
        ngx.shared.connlimit_dict = fake_dict()
        assert.is_nil(counters.of("connlimit_dict"):get("a"))
    end)

    it("adds atomically from processes that share the area", function()
        local counters = fresh()
        assert.is_true(counters.create())
        local ctr = counters.of("ratelimit")
        ctr:set("n", 0)
        ctr:set("ready", 0)
        ctr:set("go", 0)
        local N, kids = 1000000, {}
        for c = 1, 3 do
            local pid = ffi.C.fork()
            assert.is_true(pid >= 0)
            if pid == 0 then
                ctr:incr("ready", 1)
                while ctr:get("go") == 0 do ffi.C.usleep(100) end     -- start together
                for _ = 1, N do
                    ctr:incr("n", c, 0)
                end
                ffi.C._exit(0)
            end
            kids[#kids + 1] = pid
        end
        while ctr:get("ready") < 3 do ffi.C.usleep(100) end
        ctr:set("go", 1)
        local status = ffi.new("int[1]")
        for _, pid in ipairs(kids) do
            assert.equals(pid, ffi.C.waitpid(pid, status, 0))
            assert.equals(0, status[0])
        end
        -- a plain load-add-store loses updates when two processes interleave
        assert.equals(6 * N, ctr:get("n"))
    end)

    it("leaves keys beyond its capacity or the registry's room in the dict", function()
        local counters = fresh(2)
        assert.is_true(counters.create())
        local ctr = counters.of("ratelimit")
        ctr:incr("a", 1, 0)
        ctr:incr("b", 1, 0)
        assert.equals(7, ctr:incr("c", 7, 0))            -- the area is full
        assert.equals(7, ngx.shared.ratelimit.v.c)
        assert.equals(8, ctr:incr("c", 1))
        assert.is_nil(ngx.shared.ratelimit.v.a)
        ngx.shared.tollgate_counters.room = 0
        counters.CAPACITY = 10
        ctr:set("d", 4)                                 -- the registry is full
        assert.equals(4, ngx.shared.ratelimit.v.d)
        assert.equals(4, ctr:get("d"))
    end)

    it("finds the area and its values again after a reload, not in a worker", function()
        local counters = fresh()
        assert.is_true(counters.create())
        counters.of("ratelimit"):incr("a", 41, 0)
        package.loaded["tollgate.counters"] = nil      -- a reload: the same master and dicts
        counters = require("tollgate.counters")
        assert.is_true(counters.create())
        assert.equals(42, counters.of("ratelimit"):incr("a", 1))
        -- a reload into code with another capacity: a new area, the old one's names not reused
        package.loaded["tollgate.counters"] = nil
        counters = require("tollgate.counters")
        counters.CAPACITY = 1024
        assert.is_true(counters.create())
        assert.is_nil(counters.of("ratelimit"):get("a"))
        phase = "init_worker"
        package.loaded["tollgate.counters"] = nil
        counters = require("tollgate.counters")
        assert.same({ nil, "not in the init phase" }, { counters.create() })
    end)
end)
