-- Memory that the nginx master maps shared (MAP_SHARED | MAP_ANONYMOUS) in the init phase,
-- before it forks its workers: every worker, and every worker of later reloads, sees the same
-- bytes. A reload runs the init phase again in the same master; map() finds the region it
-- mapped before through "<master pid> <address> <cookie> <size>" that it left under `key` in a
-- shared dict (shared dicts survive reloads, and the master never unmaps a region); a cookie in
-- the region's header guards against an address that is not ours, and a region of another size
-- (a new version of the code) is not reused. So reloads do not map a region each, and what the
-- old workers wrote is what the new ones read.
-- Linux (MAP_ANONYMOUS = 0x20); on other systems map() fails and callers go on without it.
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
local MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20
local HEADER = 64           -- one cache line: [0] the cookie (a double); data starts after it

local _M = {}

--- Map `size` bytes, or find the region this master mapped under `key` of `dict` before.
-- Init phase (the master) only. Returns the data pointer (char *, zero-filled when new),
-- whether the region was found again, and its cookie (a number naming the region); or nil, err.
function _M.map(dict, key, size)
    local pid = C.getpid()
    local spid, saddr, scookie, ssize = match(dict:get(key) or "", "^(%d+) (%d+) (%d+) (%d+)$")
    if tonumber(spid) == pid and tonumber(ssize) == size then
        local base = cast("char *", cast("uintptr_t", tonumber(saddr)))
        local cookie = tonumber(scookie)
        if cast("double *", base)[0] == cookie then
            return base + HEADER, true, cookie
        end
    end
    local p = C.mmap(nil, size + HEADER, PROT_READ + PROT_WRITE, MAP_SHARED + MAP_ANONYMOUS,
        -1, 0)
    if cast("intptr_t", p) == -1 then
        return nil, "mmap: errno " .. ffi.errno()
    end
    local base = cast("char *", p)
    local cookie = random(1, 2 ^ 31)
    cast("double *", base)[0] = cookie
    local ok, err = dict:safe_set(key, format("%d %.0f %d %d", pid,
        tonumber(cast("uintptr_t", base)), cookie, size))
    if not ok then
        return nil, "shared dict: " .. err
    end
    return base + HEADER, false, cookie
end

return _M
