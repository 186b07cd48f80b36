-- Bringing a node to the store's config (worker 0, tollgate.config.watch): apply the change
-- log (ratelimit:config:changes) from the version the node holds, or load everything when it
-- cannot; in both cases only from the store this gateway knew (its epoch; docs/design.md §8).
-- The parsed configs live in config_dict through tollgate.config.apps.
local keys = require("tollgate.keys")
local rules_parse = require("tollgate.rules.parse")
local breaker_config = require("tollgate.breaker.config")
local hashload = require("tollgate.config.hashload")
local apps = require("tollgate.config.apps")

local tonumber = tonumber
local unpack = unpack

local _M = {}

local cdict = ngx.shared.config_dict
local parse_app = apps.parse_app
local add_clusters = apps.add_clusters

-- Compare the store's epoch and version with what this gateway knows: a store whose epoch is
-- gone or another, or whose version went back, is not obeyed (docs/design.md §8: the last good
-- config stays). Logged once per loss, counted. Returns the reason, or nil when the store is good.
local function check_store(epoch, version)
    local known, last = cdict:get("epoch"), cdict:get("version")
    local reason
    if known and not epoch then
        reason = "epoch_missing"
    elseif known and epoch ~= known then
        reason = "epoch_changed"
    elseif last and version < last then
        reason = "version_backwards"
    end
    local was = cdict:get("store_lost")
    if reason then
        if not was then
            cdict:set("store_lost", reason)
            cdict:incr("store_lost_total", 1, 0)
            ngx.log(ngx.ERR, "tollgate: config store lost (", reason, ": epoch ", tostring(known),
                " -> ", tostring(epoch), ", version ", tostring(last), " -> ", version,
                "); keeping the last good config until it is restored")
        end
        return reason
    end
    if was then
        cdict:delete("store_lost")
        ngx.log(ngx.WARN, "tollgate: config store back (epoch ", tostring(epoch), ", version ",
            version, ")")
    end
    if epoch then
        cdict:set("epoch", epoch)
    end
    return nil
end

-- Record whether the zone holds every app (`full` of `n` did not fit): while it does not, the
-- node looks the others up on demand (app()); counted and shown on /metrics.
local function zone_full(full, n)
    if full and full > 0 then
        if not cdict:get("partial") then
            ngx.log(ngx.ERR, "tollgate: config_dict is full: ", full, " of ", tostring(n),
                " apps did not fit; looking them up on demand (raise lua_shared_dict",
                " config_dict, docs/scale.md)")
        end
        cdict:incr("zone_full_total", full, 0)
        cdict:set("partial", full)     -- may evict an app: looked up on demand then
    elseif n then
        cdict:delete("partial")
    end
end

local MAX_CHANGES = 1000    -- further behind than that: a full load
local GAP_WAIT = 0.2        -- seconds a missing change may take to appear in the log
local gap_version, gap_since    -- worker 0: the first missing version, since when

--- Apply the change log (ratelimit:config:changes) from the version this node holds up to
-- `version` (worker 0, after check_store): one HMGET of the changed apps, each written as a
-- whole (or removed when gone), then one new generation. Returns the version and the list of
-- the changed apps' configs; or nil, "reload" when the node must load everything (no config yet,
-- a gap or trimmed log, a change other than an app's, too far behind); or nil, err.
function _M.apply_changes(red, version)
    local have = cdict:get("version")
    if not have or cdict:get("store_lost") or version < have then
        return nil, "reload"
    end
    if version == have then
        return version, {}
    end
    if version - have > MAX_CHANGES then
        return nil, "reload"
    end
    local log, err = red:zrangebyscore(keys.config_changes(), "(" .. have, version)
    if not log then
        return nil, err
    end
    -- the contiguous run of changes after `have`; a missing version is a writer still between
    -- INCR and ZADD (applied on the next round) or one that never logs (an older control plane,
    -- a trimmed log): still missing after GAP_WAIT, everything is loaded
    local ids, seen, upto = {}, {}, have
    for i = 1, #log do
        local v, kind, id = log[i]:match("^(%d+) (%S+) (%S+)$")
        if tonumber(v) ~= have + i then
            break
        end
        if kind ~= "app" or not keys.valid_id(id) then
            return nil, "reload"
        end
        upto = have + i
        if not seen[id] then
            seen[id] = true
            ids[#ids + 1] = id
        end
    end
    if upto < version then
        local t = ngx.now()
        if gap_version ~= upto + 1 then
            gap_version, gap_since = upto + 1, t
        elseif t - gap_since >= GAP_WAIT then
            gap_version = nil
            return nil, "reload"
        end
        if upto == have then
            return have, {}
        end
    else
        gap_version = nil
    end
    version = upto
    local vals, herr = red:hmget(keys.apps_index(), unpack(ids))
    if not vals then
        return nil, herr
    end
    local changed, bad, full = {}, 0, 0
    for i, id in ipairs(ids) do
        local json = vals[i]
        if json == ngx.null or json == nil then
            cdict:delete("app:" .. id)
        else
            local a, why = parse_app(id, json)
            if not a then
                bad = bad + 1
                ngx.log(ngx.ERR, "tollgate: bad config for app ", id, " (", tostring(why),
                    "), keeping the last good one")
            else
                local ok, serr = cdict:safe_set("app:" .. id, json)
                if not ok then
                    if serr ~= "no memory" then
                        return nil, "config_dict: " .. tostring(serr)
                    end
                    cdict:delete("app:" .. id)  -- looked up on demand, never a stale copy
                    full = full + 1
                end
                changed[#changed + 1] = a
            end
        end
    end
    if bad > 0 then
        cdict:incr("errors", bad, 0)
    end
    add_clusters(changed)
    if full > 0 then
        zone_full(full)
    end
    cdict:incr("changes_applied", #log, 0)
    cdict:set("version", version)
    cdict:incr("generation", 1, 0)
    apps.publish()
    return version, changed
end

-- The store's config version, once its epoch and version say it is the store this gateway knew
-- (check_store); nil, err otherwise (a lost store loads nothing).
local function store_version(red)
    local version, err = red:get(keys.config_version())
    if err then
        return nil, err
    end
    local epoch, eerr = red:get(keys.config_epoch())
    if eerr then
        return nil, eerr
    end
    if epoch == ngx.null then
        epoch = nil
    end
    version = tonumber(version) or 0
    local lost = check_store(epoch, version)
    if lost then
        return nil, "config store lost: " .. lost
    end
    return version
end

--- Bring the node to the store's config (worker 0): apply the change log, or load everything
-- when it cannot. Returns the version, whether it was a full load, the changed apps (nil after a
-- full load); or nil, err.
function _M.update(red)
    local version, err = store_version(red)
    if not version then
        return nil, err
    end
    local v, changed = _M.apply_changes(red, version)
    if v then
        return v, false, changed
    end
    if changed ~= "reload" then
        return nil, changed
    end
    v, err = _M.reload(red)
    return v, true, err
end

--- Load every app config from Redis (HSCAN, never KEYS) into config_dict.
-- An entry that does not parse keeps the last good config of that app and counts an error.
-- A store that is not the one this gateway knew (check_store) loads nothing.
function _M.reload(red)
    local version, err = store_version(red)
    if not version then
        return nil, err
    end
    local loaded = {}
    local bad, serr, full = hashload.into_dict(red, keys.apps_index(), cdict, "app:",
        "config for app", function(id, json)
            local a, why = parse_app(id, json)
            if a then
                loaded[#loaded + 1] = a
            end
            return a, why
        end)
    if not bad then
        return nil, serr
    end
    add_clusters(loaded, true)
    zone_full(full, #loaded)
    local rbad, rerr = rules_parse.load(red, cdict)
    if not rbad then
        return nil, rerr
    end
    bad = bad + rbad
    local bbad, berr = breaker_config.reload(red, cdict)
    if not bbad then
        return nil, berr
    end
    bad = bad + bbad
    local ibad, ierr = require("tollgate.identity").reload(red)
    if not ibad then
        return nil, ierr
    end
    bad = bad + ibad
    if bad > 0 then
        cdict:incr("errors", bad, 0)
    end
    -- a strictly new value tells every worker to drop its parsed cache
    cdict:set("version", version)
    cdict:incr("generation", 1, 0)
    cdict:incr("full_loads", 1, 0)
    apps.publish()
    return version
end

return _M
