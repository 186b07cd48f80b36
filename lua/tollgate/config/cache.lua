-- The config cache: this node's copy of the config, kept current by a generation. Redis
-- `ratelimit:apps` -> config_dict (shared by workers; written by tollgate.config.load) -> a
-- per-worker table of parsed app configs, valid for one config generation. The generation (a
-- counter of config_dict, mirrored in a page the master maps) moves on every change; its
-- journal names what changed, so that a worker drops only that (refresh). Also what the node
-- knows of the store it holds the config of (version, epoch, lost) and the config's gauges.
local cjson = require("cjson.safe")
local keys = require("tollgate.keys")
local contract = require("tollgate.config.contract")
local genpage = require("tollgate.config.genpage")
local metrics = require("tollgate.metrics")
local lookup = require("tollgate.config.lookup")

local type = type

local _M = {}

local cdict = ngx.shared.config_dict

-- Parse and check one app config (JSON from ratelimit:apps). Returns table or nil, err.
local function parse_app(id, json)
    local c, err = cjson.decode(json)
    if type(c) ~= "table" then
        return nil, "bad json: " .. tostring(err)
    end
    local field, why = contract.app(c, id)  -- the config contract, as the control plane checks it
    if field then
        return nil, field .. ": " .. why
    end
    local cluster = c.cluster_id
    local c_bw = type(c.c_bw) == "number" and c.c_bw or 1  -- left out (or null): 1
    local g, b = c.guaranteed_quota, c.burst_quota
    local prio = c.priority
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
        k_active = keys.active(cluster),
        k_debtors = keys.debtors(cluster),
        k_totals = keys.totals(cluster),
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
local APPS = keys.apps_index()
local UNVERIFIED = lookup.UNVERIFIED

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

--- Call fn(generation, drop) whenever this worker starts using a new config generation (on the
-- request path, before the request that noticed it is served); drop names what changed since
-- the worker's last generation ({ kind = { id = true } }), nil for everything.
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

-- The journal of generations: "chg:<generation>" in config_dict names what that generation
-- changed ("<kind> <id>" lines: app, key, bucket, rule, breaker, cluster, conn_app,
-- conn_cluster, user), written by whoever moved the generation for a change (the change log,
-- the connection limits' refresh); a generation without one (a full load) changes everything.
local JOURNAL_TTL = 300     -- seconds; a worker further behind than that drops everything
local JOURNAL_MAX = 256     -- generations; the same
_M.JOURNAL_TTL = JOURNAL_TTL

-- What changed between generations `from` and `to`: { kind = { id = true } }, or nil when
-- anything may have (no journal for one of them, or too far apart).
local function changed_since(from, to)
    if not from or to <= from or to - from > JOURNAL_MAX then
        return nil
    end
    local drop = {}
    for g = from + 1, to do
        local s = cdict:get("chg:" .. g)
        if not s then
            return nil
        end
        for kind, id in s:gmatch("(%S+) (%S+)") do
            local t = drop[kind]
            if not t then
                t = {}
                drop[kind] = t
            end
            t[id] = true
        end
    end
    return drop
end

--- Bring this worker's per-generation caches up to the current config generation (the request
-- path does it through cached() and app()): the entries the generations' journals name are
-- dropped (every entry without a journal), and each on_generation function is called with the
-- generation and that list (nil: everything). Returns the generation, nil when no config was
-- ever loaded.
function _M.refresh()
    local v = get_generation()
    if v ~= nil and v ~= cache_version then
        local drop = changed_since(cache_version, v)
        -- what the generations changed is no longer remembered (known or unknown) by the node
        lookup.sync(v, function(from)
            local d = changed_since(from, v)
            return d and { ["a:"] = d.app or {}, ["k:"] = d.key or {}, ["b:"] = d.bucket or {} }
        end)
        if drop then
            for id in pairs(drop.app or {}) do
                if cache[id] ~= nil then
                    cache[id] = nil
                    cache_n = cache_n - 1
                end
            end
        else
            if cache_version then
                cdict:incr("cache_wipes", 1, 0)     -- ratelimit_config_cache_wipes_total
                ngx.log(ngx.INFO, "tollgate: worker drops its parsed config (generation ",
                    cache_version, " -> ", v, ")")
            end
            cache = {}
            cache_n = 0
        end
        cache_version = v
        for i = 1, #on_generation do
            on_generation[i](v, drop)
        end
    end
    return v
end

--- The config of app `id`, false when unknown, nil when no config was ever loaded or the app
--- could not be looked up (lookup.UNVERIFIED: an identity that could not be looked up); nil,
--- "lookup_budget_exhausted" when the node's lookups of this second are spent. Only
--- apps are kept in the worker's cache: an unknown id costs a read of config_dict (and, while the
--- dict holds part of the config, a bounded lookup: tollgate.config.lookup), never a cache entry.
function _M.app(id)
    if _M.refresh() == nil or id == UNVERIFIED then
        return nil
    end
    local a = cache[id]
    if a ~= nil then
        return a
    end
    local s = cdict:get("app:" .. id)
    if s then
        a = parse_app(id, s) or false
    elseif lookup.partial() then
        -- the zone holds only part of the apps, or a first load is still under way: ask Redis
        -- (bounded: tollgate.config.lookup), keep what it finds in the cache below (dropped with
        -- it on a full load's generation or when the app changes); a Redis that does not answer
        -- refuses nothing (nil: the caller's fail-open budget of unverified requests)
        local json, err = lookup.get("a:", APPS, id)
        if json == nil then
            return nil, err == lookup.BUDGET and err or nil
        elseif not json then
            return false
        end
        a = parse_app(id, json) or false
    else
        return false
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

-- for tollgate.config.load (which requires this module, never the reverse): the app parser,
-- the cluster list's upkeep and the generation's publication
_M.add_clusters = add_clusters
function _M.publish()
    genpage.publish(gpage, get_generation)
end

--- Tell every worker that state compiled from config_dict or connlimit_dict is stale (no-op
-- while no config was ever loaded: nothing is compiled then): the entries `journal` names
-- ({"<kind> <id>", ...}), or everything without one.
function _M.bump(journal)
    local g = cdict:incr("generation", 1)
    if g then
        if journal then
            cdict:safe_set("chg:" .. g, table.concat(journal, "\n"), JOURNAL_TTL)
        end
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
    gauges["ratelimit_config_conn_full_reads_total"] = cdict:get("conn_full_reads") or 0
    gauges["ratelimit_config_changes_applied_total"] = cdict:get("changes_applied") or 0
    gauges["ratelimit_config_cache_wipes_total"] = cdict:get("cache_wipes") or 0
    gauges["ratelimit_config_dict_partial"] = cdict:get("partial") and 1 or 0
    gauges["ratelimit_config_dict_full_total"] = cdict:get("zone_full_total") or 0
    gauges["ratelimit_config_lookups_total"] = cdict:get("lookups") or 0
    gauges["ratelimit_config_lookup_errors_total"] = cdict:get("lookup_errors") or 0
    gauges["ratelimit_config_lookups_refused_total"] = cdict:get("lookups_refused") or 0
    gauges["ratelimit_config_lookup_negative_hits_total"] = cdict:get("lookup_negative_hits") or 0
end)

return _M
