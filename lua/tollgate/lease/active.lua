-- The apps with local state on this node (a lease, unreported consumption, fail-open
-- admissions, local debt): the only apps the timers visit, so that the work per tick follows
-- the apps with traffic here, never the number of configured apps.
--
-- Membership lives in the shared dict `tollgate_active` (key = app id). An app joins when this
-- node is granted a lease for it, admits it from the fail-open budget, or books local debt for
-- it (mark: one `add`, which fails fast while the app is already a member); a join is also
-- queued (the list `:q`, a key no app id can be), so worker 0 learns it with an O(1) `lpop`
-- instead of walking the dict. Worker 0 keeps the members in a Lua table; after a restart or
-- reload it reads the dict's keys once. Only worker 0 removes a member (forget), and only once
-- its state is gone; a worker that adds state after that check re-joins by itself.
-- If the dict is full, the node falls back to visiting every configured app (and says so once).
local cfgcache = require("tollgate.config.cache")

local dict = ngx.shared.tollgate_active
local log = ngx.log
local WARN = ngx.WARN
local pairs = pairs

local QUEUE = ":q"
local OVERFLOW = ":overflow"

local _M = {}

local members = nil   -- worker 0: id -> true (nil until the first sync)

local function overflow(err)
    if dict and dict:add(OVERFLOW, true) then
        log(WARN, "tollgate: the tollgate_active dict is full (", err, "): the timers visit every ",
            "configured app until a restart; raise its size (docs/operations.md)")
    end
end

--- App `id` has local state on this node (call after the state was written).
function _M.mark(id)
    if not dict then
        return
    end
    local ok, err = dict:add(id, true)
    if ok then
        local len, perr = dict:rpush(QUEUE, id)
        if not len then
            overflow(perr)
        end
    elseif err ~= "exists" then
        overflow(err)
    end
end

--- Whether the registry cannot be trusted (no dict, or it ran full): visit every app.
function _M.degraded()
    return not dict or dict:get(OVERFLOW) ~= nil
end

-- worker 0: the members, brought up to date with the queue
local function sync_members()
    if not members then
        members = {}
        for _, id in pairs(dict:get_keys(0)) do   -- once per worker 0 start, not per tick
            if id ~= QUEUE and id ~= OVERFLOW then
                members[id] = true
            end
        end
    end
    while true do
        local id = dict:lpop(QUEUE)
        if not id then
            break
        end
        members[id] = true
    end
    return members
end

_M.TIMER_HELPERS = { sync_members }     -- run interpreted (tollgate.handler)

--- Worker 0: call fn(id) for every member (or every configured app when degraded).
function _M.each(fn)
    if _M.degraded() then
        for _, id in ipairs(cfgcache.app_ids()) do
            fn(id)
        end
        return
    end
    for id in pairs(sync_members()) do
        fn(id)
    end
end

--- Worker 0: drop member `id` if still_idle(arg) — checked again after the removal, so that a
--- state another worker wrote meanwhile keeps the app (a state written later makes it join
--- again through mark). Returns whether it was dropped.
function _M.forget(id, still_idle, arg)
    if not members or not members[id] or not dict or not still_idle(arg) then
        return false
    end
    dict:delete(id)
    if still_idle(arg) then
        members[id] = nil
        return true
    end
    dict:add(id, true)
    return false
end

--- The members as a list, from any worker (scrapes and statistics: O(members), never on the
--- request path).
function _M.list()
    if _M.degraded() then
        return cfgcache.app_ids()
    end
    local ids = {}
    for _, id in pairs(dict:get_keys(0)) do
        if id ~= QUEUE and id ~= OVERFLOW then
            ids[#ids + 1] = id
        end
    end
    return ids
end

return _M
