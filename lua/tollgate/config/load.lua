-- Bringing a node to the store's config (worker 0, tollgate.config.watch): apply the change
-- log (ratelimit:config:changes) from the version the node holds, or load everything when it
-- cannot; in both cases only from the store this gateway knew (its epoch; docs/design.md §8).
-- The parsed configs live in config_dict through tollgate.config.cache.
local keys = require("tollgate.keys")
local rules_parse = require("tollgate.rules.parse")
local breaker_config = require("tollgate.breaker.config")
local hashload = require("tollgate.config.hashload")
local cfgcache = require("tollgate.config.cache")
local connconf = require("tollgate.conn.config")
local s3 = require("tollgate.s3")

local tonumber = tonumber

local _M = {}

local cdict = ngx.shared.config_dict
local parse_app = cfgcache.parse_app
local add_clusters = cfgcache.add_clusters
local JOURNAL_TTL = cfgcache.JOURNAL_TTL

local function identity_valid_bucket(b)
    return require("tollgate.identity").valid_bucket(b)
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

-- The kinds a node applies one by one (internal/store/changes.go), each with the check of its id;
-- any other kind ("all", or one this gateway does not know) is a full load.
local KINDS = {
    app = keys.valid_id, key = s3.valid_key, bucket = identity_valid_bucket,
    rule = keys.valid_id, breaker = keys.valid_id, cluster = keys.valid_id,
    conn_app = keys.valid_id, conn_cluster = keys.valid_id, user = function() return true end,
}

-- Read the contiguous run of versions after `have` (up to `version`) from the change log:
-- { kind = {ids...} } with each id once, the last version read, the number of entries; or nil,
-- "reload" (a kind applied by a full load) or nil, err. A missing version is a writer still
-- between INCR and ZADD (applied on the next round) or one that never logs (an older control
-- plane, a trimmed log): still missing after GAP_WAIT, everything is loaded.
local function read_log(red, have, version)
    local log, err = red:zrangebyscore(keys.config_changes(), "(" .. have, version)
    if not log then
        return nil, err
    end
    local by, seen, upto = {}, {}, have
    for i = 1, #log do
        local v, kind, id = log[i]:match("^(%d+) (%S+) (%S+)$")
        v = tonumber(v)
        if v ~= upto and v ~= upto + 1 then
            break       -- a gap (entries of one version come in one ZADD: all or none)
        end
        local valid = KINDS[kind]
        if not valid or not valid(id) then
            return nil, "reload"
        end
        upto = v
        local k = kind .. " " .. id
        if not seen[k] then
            seen[k] = true
            local l = by[kind]
            if not l then
                l = {}
                by[kind] = l
            end
            l[#l + 1] = id
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
    else
        gap_version = nil
    end
    return by, upto, #log
end

-- Apply the changed apps: one HMGET of the apps index, each written whole into config_dict (or
-- removed when gone). Returns the changed apps' parsed configs and the removed ids; or nil, err.
local function apply_apps(red, ids)
    local changed, removed = {}, {}
    if not ids then
        return changed, removed
    end
    local vals, herr = hashload.hmget(red, keys.apps_index(), ids)
    if not vals then
        return nil, herr
    end
    local bad, full = 0, 0
    for i, id in ipairs(ids) do
        local json = vals[i]
        if json == ngx.null or json == nil then
            cdict:delete("app:" .. id)
            hashload.note(cdict, "app:", id, false)
            removed[#removed + 1] = id
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
                hashload.note(cdict, "app:", id, ok)
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
    return changed, removed
end

-- Apply changed entries of an owner map (access keys, buckets): one HMGET of the map, each
-- entry set to its app or removed. Returns true or nil, err.
local function apply_map(red, key, prefix, ids)
    if not ids then
        return true
    end
    local vals, err = hashload.hmget(red, key, ids)
    if not vals then
        return nil, err
    end
    local full = 0
    for i, id in ipairs(ids) do
        local app = vals[i]
        if app == ngx.null or app == nil then
            cdict:delete(prefix .. id)
            hashload.note(cdict, prefix, id, false)
        elseif not keys.valid_id(app) then
            cdict:delete(prefix .. id)
            hashload.note(cdict, prefix, id, false)
            cdict:incr("errors", 1, 0)
            ngx.log(ngx.ERR, "tollgate: bad entry in ", key, " (field of ", #id, " bytes), skipped")
        else
            local ok, serr = cdict:safe_set(prefix .. id, app)
            if not ok then
                if serr ~= "no memory" then
                    return nil, "config_dict: " .. tostring(serr)
                end
                cdict:delete(prefix .. id)
                full = full + 1
            end
            hashload.note(cdict, prefix, id, ok)
        end
    end
    if full > 0 then
        zone_full(full)
    end
    return true
end

-- Apply changed rules: one HMGET of the rules index; a rule that does not parse keeps its last
-- good copy. Returns true or nil, err.
local function apply_rules(red, ids)
    if not ids then
        return true
    end
    local vals, err = hashload.hmget(red, keys.rules_index(), ids)
    if not vals then
        return nil, err
    end
    hashload.held(cdict, "rule:")     -- (listed before a change is noted: see hashload)
    for i, id in ipairs(ids) do
        local json = vals[i]
        if json == ngx.null or json == nil then
            cdict:delete("rule:" .. id)
            hashload.note(cdict, "rule:", id, false)
        else
            local r, field, code = rules_parse.parse(id, json)
            if r then
                local ok, serr = cdict:safe_set("rule:" .. id, json)
                if not ok then
                    return nil, "config_dict: " .. tostring(serr)
                end
                hashload.note(cdict, "rule:", id, true)
            else
                cdict:incr("errors", 1, 0)
                ngx.log(ngx.ERR, "tollgate: bad rule ", id, " (", tostring(field),
                    code and " " .. code or "", "), keeping the last good one")
            end
        end
    end
    return rules_parse.list_ids(cdict)
end

-- (apply_rules ends with rules_parse.list_ids: the list of stored rules workers compile from)
-- The parsed configs of apps `ids` this node holds (for their connection limits' keys).
local function held(ids)
    local out = {}
    for _, id in ipairs(ids or {}) do
        local json = cdict:get("app:" .. id)
        local a = json and parse_app(id, json)
        if a then
            out[#out + 1] = a
        end
    end
    return out
end

--- Apply the change log (ratelimit:config:changes) from the version this node holds up to
-- `version` (worker 0, after check_store), each kind as that change: apps (one HMGET of the
-- apps index, each app written whole or removed) and their connection limits, access keys and
-- buckets (one HMGET of their map), rules (one HMGET of the rules), breakers (their hash,
-- small), a cluster's or an app's connection limits. Then one new generation whose journal
-- ("chg:<generation>") names what changed, so that workers drop those entries only. Returns the
-- version and the changed apps' configs; or nil, "reload" when the node must load everything
-- (no config yet, a gap or trimmed log, a kind not applied by change, too far behind); or nil,
-- err.
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
    local by, upto, n = read_log(red, have, version)
    if not by then
        return nil, upto
    end
    if upto == have then
        return have, {}
    end
    local changed, removed = apply_apps(red, by.app)
    if not changed then
        return nil, removed
    end
    local ok, err = apply_map(red, keys.access_keys(), "ak:", by.key)
    if ok then
        ok, err = require("tollgate.s3.sigsecrets").apply(red, by.key)
    end
    if ok then
        ok, err = apply_map(red, keys.buckets(), "bk:", by.bucket)
    end
    if ok then
        ok, err = apply_rules(red, by.rule)
    end
    if ok and by.breaker then
        local bbad, berr = breaker_config.apply(red, cdict, by.breaker)
        ok, err = bbad, berr
        if bbad and bbad > 0 then
            cdict:incr("errors", bbad, 0)
        end
    end
    if ok then
        -- connection limits: the changed apps' (written with the app) and the named ones
        local capps = held(by.conn_app)
        for i = 1, #changed do
            capps[#capps + 1] = changed[i]
        end
        ok, err = connconf.read(red, capps, by.conn_cluster or {}, removed)
    end
    if not ok then
        return nil, err
    end
    local journal = {}
    for kind, ids in pairs(by) do
        for i = 1, #ids do
            journal[#journal + 1] = kind .. " " .. ids[i]
        end
    end
    cdict:incr("changes_applied", n, 0)
    cdict:set("version", upto)
    local g = cdict:incr("generation", 1, 0)
    -- the journal expires: a worker that comes back later than that drops everything
    cdict:safe_set("chg:" .. g, table.concat(journal, "\n"), JOURNAL_TTL)
    cfgcache.publish()
    return upto, changed
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
    if not v then
        return nil, err
    end
    return v, true, err     -- (err: the apps loaded)
end

--- Load every config from Redis into config_dict (worker 0, in the background): the apps
-- index, then rules, breakers, access keys and buckets, each by HSCAN pages written as they
-- come with a yield between pages (tollgate.config.hashload), what is gone dropped without a
-- walk of the dict (the connection limits follow: tollgate.config.watch). An entry that does
-- not parse keeps its last good config and counts an error. A node without config ("loading")
-- looks up the apps it has not loaded yet on demand (cfgcache.app) and reports no version until
-- the load is done. A store that is not the one this gateway knew (check_store) loads nothing.
-- Returns the version and the apps loaded ({id, cluster}), or nil, err.
function _M.reload(red)
    local version, err = store_version(red)
    if not version then
        return nil, err
    end
    if not cdict:get("version") and not cdict:get("loading") then
        cdict:set("loading", 1)
        cdict:incr("generation", 1, 0)  -- a generation, no version yet: apps looked up on demand
        cfgcache.publish()
    end
    local loaded, clusters = {}, {}
    local bad, serr, full = hashload.into_dict(red, keys.apps_index(), cdict, "app:",
        "config for app", function(id, json)
            local a, why = parse_app(id, json)
            if a then
                loaded[#loaded + 1] = { id = id, cluster = a.cluster }
                if not clusters[a.cluster] then
                    clusters[a.cluster] = { cluster = a.cluster }
                end
            end
            return a, why
        end)
    if not bad then
        return nil, serr
    end
    add_clusters(clusters, true)
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
    local sbad, serr2 = require("tollgate.s3.sigsecrets").reload(red, s3.valid_key)
    if not sbad then
        return nil, serr2
    end
    bad = bad + sbad
    if bad > 0 then
        cdict:incr("errors", bad, 0)
    end
    -- a new generation without a journal tells every worker to drop its parsed caches
    cdict:set("version", version)
    cdict:delete("loading")
    cdict:incr("generation", 1, 0)
    cdict:incr("full_loads", 1, 0)
    cfgcache.publish()
    return version, loaded
end

return _M
