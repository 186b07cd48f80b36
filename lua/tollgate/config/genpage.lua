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
-- otherwise page() is nil and callers read the dict. A reload finds the page again
-- (tollgate.mastermap).
local ffi = require("ffi")
local mastermap = require("tollgate.mastermap")

local SIZE = 64
local NONE = -1         -- the page's value while the dict has no generation
local KEY = "genpage"   -- where mastermap keeps the page's address, in the dict

local _M = { NONE = NONE }

local page      -- double[1]: the mirrored generation

--- Map the page (init phase, master). dict: config_dict. Returns the page or nil, err (callers
-- then go on without it).
function _M.create(dict)
    local p, found = mastermap.map(dict, KEY, SIZE)
    if not p then
        return nil, found       -- the error
    end
    p = ffi.cast("double *", p)
    if not found then
        p[0] = NONE
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
