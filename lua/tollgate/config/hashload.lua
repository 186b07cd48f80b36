-- Walking Redis hashes of configs (HSCAN in batches, never HGETALL or KEYS), and loading one
-- into config_dict with the last-good rule every config kind follows: an entry that does not
-- check out keeps its last good copy (logged and counted), an id gone from the hash loses its
-- copy.
local keys = require("tollgate.keys")

local _M = {}

local BATCH = 1000

--- fn(field, value) for every entry of hash `key`. Returns true, or nil, err.
function _M.each(red, key, fn)
    local cursor = "0"
    repeat
        local res, err = red:hscan(key, cursor, "COUNT", 500)
        if not res then
            return nil, err
        end
        cursor = res[1]
        local kv = res[2]
        for i = 1, #kv, 2 do
            fn(kv[i], kv[i + 1])
        end
    until cursor == "0"
    return true
end

--- Load hash `key` into cdict as "<prefix><id>" = the entry's JSON. check(id, json) returns
-- truthy, or nil, a reason and optionally a code; `what` names the kind in log lines ("app",
-- "rule"). Returns the number of refused entries (invalid ids included), or nil, err.
function _M.into_dict(red, key, cdict, prefix, what, check)
    local fresh, bad = {}, 0
    local ok, err = _M.each(red, key, function(id, json)
        local good, why, code
        if keys.valid_id(id) then
            good, why, code = check(id, json)
        end
        if good then
            fresh[id] = json
            return
        end
        bad = bad + 1
        if keys.valid_id(id) then
            ngx.log(ngx.ERR, "tollgate: bad ", what, " ", id, " (", tostring(why),
                code and " " .. code or "", "), keeping the last good one")
            fresh[id] = cdict:get(prefix .. id) or false
        end
    end)
    if not ok then
        return nil, err
    end
    -- write first, then drop what is gone: every entry is the old or the new copy, never none;
    -- an entry the zone has no room for is counted (the node then looks it up on demand) and
    -- the rest still goes in; yield now and then so that the worker serves its requests
    local full, n = 0, 0
    for id, json in pairs(fresh) do
        if json then
            local sok, serr = cdict:safe_set(prefix .. id, json)
            if not sok then
                if serr ~= "no memory" then
                    return nil, "config_dict: " .. tostring(serr)
                end
                full = full + 1
            end
            n = n + 1
            if n % BATCH == 0 then
                ngx.sleep(0)
            end
        end
    end
    for _, k in ipairs(cdict:get_keys(0)) do
        if k:sub(1, #prefix) == prefix and not fresh[k:sub(#prefix + 1)] then
            cdict:delete(k)
        end
    end
    return bad, nil, full
end

return _M
