-- Walking Redis hashes of configs (HSCAN in batches, never HGETALL or KEYS), and loading one
-- into config_dict with the last-good rule every config kind follows: an entry that does not
-- check out keeps its last good copy (logged and counted), an id gone from the hash loses its
-- copy.
--
-- Loads run in worker 0 (tollgate.config.watch), which keeps the ids it wrote under each prefix
-- (note()): a full load removes the ids it held and did not see, without walking the dict
-- (get_keys(0) locks the zone for as long as it lists every key). Only the first load of a
-- worker that finds a config already in the dict (a reload of nginx) lists the dict once.
local keys = require("tollgate.keys")

local _M = {}

local COUNT = 1000      -- HSCAN COUNT: a page of about this many entries, then a yield
local SLICE = 250       -- entries checked between two yields within a page

local held = {}         -- worker 0: prefix -> { id = true } of the entries it holds in the dict

--- fn(field, value) for every entry of hash `key`; page(), when given, after each HSCAN page
--- (before the next one: written as it comes, with a yield). Returns true, or nil, err.
function _M.each(red, key, fn, page)
    local cursor = "0"
    repeat
        local res, err = red:hscan(key, cursor, "COUNT", COUNT)
        if not res then
            return nil, err
        end
        cursor = res[1]
        local kv = res[2]
        for i = 1, #kv, 2 do
            fn(kv[i], kv[i + 1])
            if i % (2 * SLICE) == 1 and i > 1 then
                ngx.sleep(0.001)    -- requests of this worker wait one slice at most
            end
        end
        if page then
            local ok, perr = page()
            if not ok then
                return nil, perr
            end
        end
    until cursor == "0"
    return true
end

-- The ids worker 0 holds under `prefix` (listed from the dict once, when it has a config that
-- this worker did not load).
local function holding(cdict, prefix)
    local h = held[prefix]
    if h then
        return h
    end
    h = {}
    if cdict:get("version") then
        local plen = #prefix
        for _, k in ipairs(cdict:get_keys(0)) do
            if k:sub(1, plen) == prefix then
                h[k:sub(plen + 1)] = true
            end
        end
    end
    held[prefix] = h
    return h
end

--- The ids worker 0 holds under `prefix` ({ id = true }; do not modify).
_M.held = holding

--- Note that the entry `id` under `prefix` is in the dict (present) or not (a change applied
--- outside a full load).
function _M.note(cdict, prefix, id, present)
    holding(cdict, prefix)[id] = present or nil
end

--- Load hash `key` into cdict as "<prefix><id>" = value, page by page (each HSCAN page written
-- before the next is read, with a yield between pages: requests keep being served). check(id,
-- value) returns truthy, or nil, a reason and optionally a code; `what` names the kind in log
-- lines ("app", "rule"); valid(id) checks the field (default keys.valid_id). Returns the number
-- of refused entries (invalid ids included), nil and the number of entries that found no room,
-- the number of entries written; or nil, err.
function _M.into_dict(red, key, cdict, prefix, what, check, valid)
    valid = valid or keys.valid_id
    local before = holding(cdict, prefix)
    local seen, bad, full, n = {}, 0, 0, 0
    local batch = {}
    local function write()
        for id, v in pairs(batch) do
            local ok, serr = cdict:safe_set(prefix .. id, v)
            if not ok then
                if serr ~= "no memory" then
                    return nil, "config_dict: " .. tostring(serr)
                end
                full = full + 1
                seen[id] = nil      -- not held: looked up on demand
            end
            n = n + 1
        end
        batch = {}
        ngx.sleep(0.001)    -- (sleep(0) warns on nginx builds without the delayed-events patch)
        return true
    end
    local ok, err = _M.each(red, key, function(id, v)
        local good, why, code
        if valid(id) then
            good, why, code = check(id, v)
        end
        if good then
            batch[id], seen[id] = v, true
            return
        end
        bad = bad + 1
        if valid(id) then
            if what then    -- (nil: the check logs, e.g. without the id)
                ngx.log(ngx.ERR, "tollgate: bad ", what, " ", id, " (", tostring(why),
                    code and " " .. code or "", "), keeping the last good one")
            end
            if before[id] then
                seen[id] = true     -- keeps its last good copy
            end
        end
    end, write)
    if not ok then
        return nil, err
    end
    -- every entry written first, then what is gone dropped: each is its old or its new copy
    local k = 0
    for id in pairs(before) do
        if not seen[id] then
            cdict:delete(prefix .. id)
        end
        k = k + 1
        if k % 10000 == 0 then
            ngx.sleep(0.001)
        end
    end
    held[prefix] = seen
    return bad, nil, full, n
end

return _M
