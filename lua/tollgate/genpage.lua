-- A mirror of config_dict's "generation" in a page of memory that the nginx master maps shared
-- before it forks its workers. The request path compares its cached generation with the page:
-- a plain memory read, where `config_dict:get` locks the zone and moves the key in the zone's
-- LRU list, i.e. writes cache lines both workers share, on every request.
--
-- config_dict stays the authority. Whoever moves the generation publishes it afterwards:
-- store the dict's value in the page, read the dict again, repeat until they agree. The last
-- store of all is followed by its writer's read, so once the writers are done the page equals
-- the dict, whatever order their stores landed in. A page that lags (a writer killed between
-- the two steps) only sends requests down the slow path, which reads the dict; each worker
-- publishes again when it starts and once a second when it finds the page behind.
--
-- The page exists only when create() ran in the init phase (the master, before the fork);
-- otherwise page() is nil and callers read the dict. A reload runs init again in the same
-- master: create() finds its page through the address it left in the dict (shared dicts
-- survive reloads, and the master never unmaps the page), so reloads do not map a page each.
local ffi = require("ffi")

local C = ffi.C
local cast = ffi.cast
local tonumber = tonumber
local format = string.format
local match = string.match
local random = math.random

pcall(ffi.cdef, [[
void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
int getpid(void);
]])

local PROT_READ, PROT_WRITE = 1, 2
local MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20    -- Linux
local SIZE = 4096
local NONE = -1         -- the page's value while the dict has no generation
local KEY = "genpage"   -- "<master pid> <address> <cookie>" of the page, in the dict

local _M = { NONE = NONE }

local page      -- double[2]: [0] the mirrored generation, [1] a cookie naming this page

local function map()
    local p = C.mmap(nil, SIZE, PROT_READ + PROT_WRITE, MAP_SHARED + MAP_ANONYMOUS, -1, 0)
    if cast("intptr_t", p) == -1 then
        return nil, "mmap: " .. ffi.errno()
    end
    return cast("double *", p)
end

--- Map the page (init phase, master). dict: config_dict. Returns the page or nil, err (callers
-- then go on without it).
function _M.create(dict)
    local pid = C.getpid()
    local spid, saddr, scookie = match(dict:get(KEY) or "", "^(%d+) (%d+) (%d+)$")
    if tonumber(spid) == pid then
        local p = cast("double *", cast("uintptr_t", tonumber(saddr)))
        if p[1] == tonumber(scookie) then
            page = p
            return page
        end
    end
    local p, err = map()
    if not p then
        return nil, err
    end
    p[0] = NONE
    p[1] = random(1, 2 ^ 31)
    local ok, serr = dict:safe_set(KEY, format("%d %.0f %.0f", pid,
        tonumber(cast("uintptr_t", p)), p[1]))
    if not ok then
        return nil, "config_dict: " .. serr
    end
    page = p
    return page
end

--- The page, nil when there is none.
function _M.page()
    return page
end

--- Bring page p up to get() (the dict's generation, nil for none).
function _M.publish(p, get)
    if not p then
        return
    end
    repeat
        local g = get() or NONE
        p[0] = g
    until (get() or NONE) == g
end

--- Publish if the page is behind get() (a periodic check).
function _M.check(p, get)
    if p and p[0] ~= (get() or NONE) then
        _M.publish(p, get)
    end
end

return _M
