-- Integer counters of the hot path (the lease's tokens and pending consumption, the connection
-- limiter's in-flight counts) in memory the nginx master maps before it forks its workers,
-- changed with the CPU's atomic instructions: libatomic's __atomic_fetch_add_8 through the FFI
-- (a `lock xadd` on x86-64). A shared dict's `incr` locks the zone, hashes the key, walks the
-- zone's tree and moves the node in its LRU list (~450 instructions); an atomic add is ~20.
--
-- A store has the get / incr / set of ngx.shared.DICT for the keys it is used for (every access
-- to such a key must go through the store). Where a key's counter lives is written once in
-- the `tollgate_counters` dict (name -> slot; besides, only the addresses of the memory the
-- master maps), which never evicts (safe_add, nothing deleted), so a name keeps its slot for
-- the master's life, across reloads. Without the area
-- (no init phase, no libatomic, the dict missing, mmap failing) and for keys that no longer
-- fit (the area or the registry full: permanent, so every worker agrees), a store is the
-- shared dict it was made for: same results, the dict's cost. The area is opt-in
-- (TOLLGATE_SHARED_COUNTERS=on): DESIGN §1 and §6 keep these counters in shared dicts, and the
-- default follows it.
--
-- Values are integers (|v| < 2^53 to stay exact as Lua numbers); a counter nobody wrote reads
-- nil, as a missing dict key. Aligned 8-byte loads and stores are atomic on x86-64 and arm64,
-- so reads are plain loads.
local ffi = require("ffi")
local mastermap = require("tollgate.mastermap")

local tonumber = tonumber
local error = error
local setmetatable = setmetatable
local log = ngx.log
local WARN = ngx.WARN

pcall(ffi.cdef, [[
int64_t __atomic_fetch_add_8(volatile void *ptr, int64_t val, int memorder);
void __atomic_store_8(volatile void *ptr, int64_t val, int memorder);
bool __atomic_compare_exchange_8(volatile void *ptr, void *expected, int64_t desired, bool weak,
                                 int success_memorder, int failure_memorder);
]])
local SEQ_CST = 5

local _M = {}

_M.CAPACITY = 65536                     -- counters in the area (512 KiB)
local REGISTRY = "tollgate_counters"    -- the shared dict naming the slots
local KEY = "#area"                     -- where mastermap keeps the area's address

local area          -- int64_t[CAPACITY], nil without one
local fadd, fstore, fcas
local expected = ffi.new("int64_t[1]")
local reg           -- the registry dict
local prefix        -- "<cookie>:" (registry names of this area)
local seq_key

--- Map the area (init phase, the master; a reload finds the area again). Returns true, or
-- nil and why the stores will be their shared dicts.
function _M.create()
    if ngx.get_phase() ~= "init" then
        return nil, "not in the init phase"
    end
    reg = ngx.shared[REGISTRY]
    if not reg then
        return nil, "no lua_shared_dict " .. REGISTRY
    end
    local ok, l = pcall(ffi.load, "libatomic.so.1")
    if not ok then
        return nil, "libatomic: " .. tostring(l)
    end
    local p, found, cookie = mastermap.map(reg, KEY, _M.CAPACITY * 8)
    if not p then
        return nil, found
    end
    _M.libatomic = l     -- kept: a collected clib unloads its library
    fadd, fstore = l.__atomic_fetch_add_8, l.__atomic_store_8
    fcas = l.__atomic_compare_exchange_8
    area = ffi.cast("int64_t *", p)
    prefix = cookie .. ":"
    seq_key = cookie .. "#n"
    return true
end

local Store = {}
Store.__index = Store

-- The slot of `key`: a number, false (the key lives in the dict), or nil (no slot yet and
-- `alloc` not asked for).
local function slot(self, key, alloc)
    local i = self.slots[key]
    if i ~= nil then
        return i
    end
    local name = prefix .. self.ns .. key
    i = reg:get(name)
    if i == nil then
        if not alloc then
            return nil
        end
        local n = reg:incr(seq_key, 1, 0)
        local ok, err = reg:safe_add(name, n and n <= _M.CAPACITY and n - 1 or false)
        if not ok and err ~= "exists" then
            -- the registry is full and stays full (nothing is ever deleted from it): this key
            -- lives in the dict, for every worker, from now on
            log(WARN, "tollgate: ", REGISTRY, " full, ", key, " counted in the dict")
            i = false
        else
            i = reg:get(name)
        end
    end
    if self.n >= 100000 then
        self.slots, self.n = {}, 0
    end
    self.slots[key] = i
    self.n = self.n + 1
    return i
end

--- dict:get(key)
function Store:get(key)
    if area then
        local i = slot(self, key, false)
        if i then
            return tonumber(area[i])
        end
    end
    return self.dict:get(key)
end

--- dict:incr(key, by, init): the new value, or nil, "not found" (no init, key never written).
-- init may only be nil or 0 (a new slot holds 0).
function Store:incr(key, by, init)
    if area then
        if init ~= nil and init ~= 0 then
            error("counters: init must be 0 or nil", 2)
        end
        local i = slot(self, key, init ~= nil)
        if i then
            return tonumber(fadd(area + i, by, SEQ_CST)) + by
        end
    end
    return self.dict:incr(key, by, init)
end

--- dict:set(key, value) (numbers only).
function Store:set(key, value)
    if area then
        local i = slot(self, key, true)
        if i then
            fstore(area + i, value, SEQ_CST)
            return true
        end
    end
    return self.dict:set(key, value)
end

local stores = {}

--- The store of the counters of shared dict `name` (one per name and worker).
function _M.of(name)
    local s = stores[name]
    if not s then
        local dict = ngx.shared[name]
        if not dict then
            error("counters: no lua_shared_dict " .. name, 2)
        end
        s = setmetatable({ dict = dict, ns = name .. ":", slots = {}, n = 0 }, Store)
        stores[name] = s
    end
    return s
end

--- Whether the counters live in the shared area (false: in their dicts). The primitives
-- below exist only then.
function _M.shared()
    return area ~= nil
end

--- The registry dict and the prefix of this area's names in it (where other memory the master
-- maps with the counters keeps its address: tollgate.conn.track's record table).
function _M.registry()
    return reg, prefix
end

--- Atomic store of integer v at p (int64_t * into memory processes share).
function _M.store(p, v)
    fstore(p, v, SEQ_CST)
end

--- Compare-and-swap at p: true when it held `old` and now holds `new`.
function _M.cas(p, old, new)
    expected[0] = old
    return fcas(p, expected, new, false, SEQ_CST, SEQ_CST)
end

return _M
