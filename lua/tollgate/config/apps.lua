-- The gateway's settings (read through tollgate.settings) and the cache of app configs:
-- Redis `ratelimit:apps` -> config_dict (shared by workers) -> a
-- per-worker table of parsed configs keyed by config version.
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local rules_parse = require("tollgate.rules.parse")
local breaker_config = require("tollgate.breaker.config")
local hashload = require("tollgate.config.hashload")
local genpage = require("tollgate.config.genpage")
local settings = require("tollgate.settings")
local metrics = require("tollgate.metrics")

local tonumber = tonumber
local type = type
local floor = math.floor

local _M = {}

local cdict = ngx.shared.config_dict

--- The gateway's settings (tollgate.settings: init() options over TOLLGATE_* variables over
-- defaults); error() naming every bad setting.
function _M.settings(opts)
    return settings.get(opts)
end

-- Parse and check one app config (JSON from ratelimit:apps). Returns table or nil, err.
local function parse_app(id, json)
    local c, err = cjson.decode(json)
    if type(c) ~= "table" then
        return nil, "bad json: " .. tostring(err)
    end
    local cluster = c.cluster_id
    if not keys.valid_id(cluster) then
        return nil, "invalid cluster_id"
    end
    local c_bw = c.c_bw == nil and 1 or c.c_bw
    if type(c_bw) ~= "number" or c_bw < 0 or c_bw ~= floor(c_bw) then
        return nil, "invalid c_bw"
    end
    local g, b = c.guaranteed_quota, c.burst_quota
    if type(g) ~= "number" or type(b) ~= "number" or g <= 0 or b < g then
        return nil, "invalid quotas"
    end
    local prio = c.priority
    if type(prio) ~= "number" or prio < 0 or prio > 3 then
        return nil, "invalid priority"
    end
    return {
        id = id,
        cluster = cluster,
        c_bw = c_bw,
        guaranteed = g,
        burst = b,
        priority = prio,
        enabled = c.enabled ~= false,
        -- Redis keys of this app (built once per config version, not per request)
        k_l2 = keys.l2(cluster, id),
        k_leases = keys.leases(cluster, id),
        k_stats = keys.stats(cluster, id),
        k_nodes = keys.nodes(cluster, id),
        k_l1 = keys.l1(cluster),
        k_em = "em:" .. cluster,    -- emergency state of the cluster in the ratelimit dict
    }
end
_M.parse_app = parse_app

-- per-worker cache, invalidated by the generation bumped on every reload
local cache = {}
local cache_n = 0
local cache_version = nil
local CACHE_MAX = 20000
local on_generation = {}    -- functions(generation) of per-worker state compiled from config
local gpage                 -- the generation's mirror (tollgate.config.genpage), nil without one
local NONE = genpage.NONE
local lookup                -- function(id) -> json, false (no such app) or nil, err

--- Set the on-demand lookup of apps the node does not hold (the zone is full):
--- fn(id) returns the app's JSON, false when there is no such app, or nil, err.
function _M.set_lookup(fn)
    lookup = fn
end

local function get_generation()
    return cdict:get("generation")
end

--- Map the page that mirrors the generation. Only in the init phase (the master, whose workers
-- inherit it); elsewhere a no-op that returns nil. Returns nil, err when mapping failed.
function _M.share_generation()
    if ngx.get_phase() ~= "init" then
        return nil
    end
    local p, err = genpage.create(cdict)
    gpage = p
    return p, err
end

--- Make the mirror show the dict's generation (worker start; then once a second, for a writer
-- that died between moving the generation and publishing it).
function _M.publish_generation(always)
    if always then
        genpage.publish(gpage, get_generation)
    else
        genpage.check(gpage, get_generation)
    end
end

--- Call fn(generation) whenever this worker starts using a new config generation (on the
-- request path, before the request that noticed it is served).
function _M.on_generation(fn)
    on_generation[#on_generation + 1] = fn
end

--- The parsed config of app `id` if this worker has it at hand (the hot path's first try: a
-- hit needs no id validation, since only valid ids are ever cached as known apps).
function _M.cached(id)
    if gpage then
        if gpage[0] ~= (cache_version or NONE) then
            return nil
        end
    elseif get_generation() ~= cache_version then
        return nil
    end
    return cache[id] or nil
end

--- true when this worker's per-generation caches follow the current config generation (a
-- plain read of the generation's mirror when it has one).
function _M.current()
    if gpage then
        return gpage[0] == (cache_version or NONE)
    end
    return get_generation() == cache_version
end

--- Bring this worker's per-generation caches up to the current config generation (the request
-- path does it through cached() and app()). Returns the generation, nil when no config was
-- ever loaded.
function _M.refresh()
    local v = get_generation()
    if v ~= nil and v ~= cache_version then
        cache = {}
        cache_n = 0
        cache_version = v
        for i = 1, #on_generation do
            on_generation[i](v)
        end
    end
    return v
end

--- The config of app `id`, false when unknown, nil when no config was ever loaded.
function _M.app(id)
    if _M.refresh() == nil then
        return nil
    end
    local a = cache[id]
    if a ~= nil then
        return a
    end
    local s = cdict:get("app:" .. id)
    if s then
        a = parse_app(id, s) or false
    elseif lookup and cdict:get("partial") then
        -- the zone holds only part of the apps: ask Redis (bounded by the cache below, dropped
        -- with it on the next generation); a Redis that does not answer refuses nothing
        -- (nil: fail-open, as before any config)
        local json, err = lookup(id)
        if json then
            a = parse_app(id, json) or false
        elseif json == false then
            a = false
        else
            cdict:incr("lookup_errors", 1, 0)
            ngx.log(ngx.WARN, "tollgate: app ", id, " not looked up: ", tostring(err))
            return nil
        end
        cdict:incr("lookups", 1, 0)
    else
        a = false
    end
    if cache_n >= CACHE_MAX then
        cache = {}
        cache_n = 0
    end
    cache[id] = a
    cache_n = cache_n + 1
    return a
end

function _M.version()
    return cdict:get("version")
end

--- All known app ids (per worker, rebuilt when the version changes).
local ids_cache, ids_version = {}, nil
function _M.app_ids()
    local v = get_generation()
    if v ~= ids_version then
        local ids = {}
        for _, k in ipairs(cdict:get_keys(0)) do
            if k:sub(1, 4) == "app:" then
                ids[#ids + 1] = k:sub(5)
            end
        end
        ids_cache, ids_version = ids, v
    end
    return ids_cache
end

local clusters_cache, clusters_version = {}, nil

--- The clusters of the configured apps, as { cluster = id, k_l1 = key } (a list kept in
-- config_dict by the loads, parsed once per config generation; no walk of the dict).
function _M.clusters()
    local v = get_generation()
    if v ~= clusters_version then
        local list = {}
        for c in (cdict:get("clusters") or ""):gmatch("%S+") do
            list[#list + 1] = { cluster = c, k_l1 = keys.l1(c) }
        end
        clusters_cache, clusters_version = list, v
    end
    return clusters_cache
end

-- Add the clusters of `apps` (parsed configs) to the dict's list (set = replace it).
local function add_clusters(apps, set)
    local seen, out = {}, {}
    if not set then
        for c in (cdict:get("clusters") or ""):gmatch("%S+") do
            seen[c] = true
            out[#out + 1] = c
        end
    end
    local n = #out
    for _, a in pairs(apps) do
        if not seen[a.cluster] then
            seen[a.cluster] = true
            out[#out + 1] = a.cluster
        end
    end
    if set or #out > n then
        cdict:set("clusters", table.concat(out, " "))
    end
end

--- The reason the config store is not the one this gateway knew (epoch_missing,
-- epoch_changed, version_backwards), nil while it is.
function _M.store_lost()
    return cdict:get("store_lost")
end

--- Times a lost store was noticed (a counter of config_dict).
function _M.store_lost_total()
    return cdict:get("store_lost_total") or 0
end

--- The epoch this gateway knows (nil before it saw one).
function _M.epoch()
    return cdict:get("epoch")
end

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
    genpage.publish(gpage, get_generation)
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
    genpage.publish(gpage, get_generation)
    return version
end

--- Tell every worker that state compiled from config_dict or connlimit_dict is stale (no-op
-- while no config was ever loaded: nothing is compiled then).
function _M.bump()
    if cdict:incr("generation", 1) then
        genpage.publish(gpage, get_generation)
    end
end

_M.generation = get_generation

-- the /metrics gauges of the config this node enforces
metrics.add_gauges(function(gauges)
    gauges["ratelimit_config_version"] = _M.version() or 0
    gauges["ratelimit_config_errors_total"] = cdict:get("errors") or 0
    gauges["ratelimit_config_store_lost"] = _M.store_lost() and 1 or 0
    gauges["ratelimit_config_store_lost_total"] = _M.store_lost_total()
    gauges["ratelimit_config_full_loads_total"] = cdict:get("full_loads") or 0
    gauges["ratelimit_config_changes_applied_total"] = cdict:get("changes_applied") or 0
    gauges["ratelimit_config_dict_partial"] = cdict:get("partial") and 1 or 0
    gauges["ratelimit_config_dict_full_total"] = cdict:get("zone_full_total") or 0
    gauges["ratelimit_config_lookups_total"] = cdict:get("lookups") or 0
    gauges["ratelimit_config_lookup_errors_total"] = cdict:get("lookup_errors") or 0
end)

return _M
