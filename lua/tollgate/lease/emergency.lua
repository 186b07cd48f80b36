-- Emergency mode on the gateway (Req 6, docs/design.md §3 "Emergency"). The control plane activates
-- it in Redis (L1 hash: emergency_mode, emergency_until) and announces it on ratelimit:emergency;
-- every node applies it at once: P3 apps are refused locally with `emergency_blocked`, P1/P2
-- leases are cut to their ratio (the rest goes back to L2 with the next report), and L2 grants
-- apply the ratios to refills. The state expires on the node at `until` by itself, so an
-- emergency ends on time even with the control plane down.
local cjson = require("cjson.safe")
local cfgcache = require("tollgate.config.cache")
local shm = require("tollgate.shm")

local dict = shm.dict
local now = ngx.now
local log = ngx.log
local WARN = ngx.WARN
local floor = math.floor

local _M = {}

local RATIO = { [0] = 1, [1] = 0.5, [2] = 0.1, [3] = 0 }

function _M.ratio(priority)
    return RATIO[priority] or 0
end

--- Request path: the reset time if app `a` is blocked by an emergency, else nil.
function _M.blocked(a)
    if a.priority < 3 then
        return nil
    end
    return dict:get(a.k_em)
end

-- Cut the leases of the cluster's apps to their emergency ratio; the rest is given back. Only
-- apps with local state (the active set) hold a lease: no walk of every configured app.
local function scale_leases(cluster)
    for _, id in ipairs(require("tollgate.lease.active").list()) do
        local a = cfgcache.app(id)
        if a and a.cluster == cluster then
            local ratio = _M.ratio(a.priority)
            if ratio < 1 then
                local k = shm.keys(id)
                local tokens = dict:get(k.tokens) or 0
                -- keep the ratio of the lease, and at most the ratio of a fair share of the burst
                local nodes = dict:get(k.nodes) or 1
                local keep = floor(tokens * ratio)
                local share = floor(ratio * a.burst / (2 * (nodes > 0 and nodes or 1)))
                if keep > share then
                    keep = share
                end
                local give = tokens - keep
                if give > 0 then
                    local took = shm.take(k.tokens, give)
                    dict:incr(k.give_back, took, 0)
                end
                dict:set(k.target, floor((dict:get(k.target) or 0) * ratio))
            end
        end
    end
end

--- Apply the emergency state of `cluster` (from a notice or a poll).
function _M.apply(cluster, active, expires, reason)
    local key = "em:" .. cluster
    local t = now()
    if active and expires and expires > t then
        local was = dict:get(key)
        dict:set(key, expires, expires - t)
        if not was then
            scale_leases(cluster)
            log(WARN, "tollgate: emergency mode in cluster ", cluster, " until ", expires,
                " (", reason or "", ")")
        end
    elseif dict:get(key) then
        dict:delete(key)
        log(WARN, "tollgate: emergency mode in cluster ", cluster, " ended")
    end
end

--- Handle a message of the emergency channel: {"cluster_id","active","until","reason"}.
function _M.notice(payload)
    local m = cjson.decode(payload)
    if type(m) ~= "table" or type(m.cluster_id) ~= "string" then
        log(WARN, "tollgate: ignoring malformed emergency notice")
        return
    end
    _M.apply(m.cluster_id, m.active == true, tonumber(m["until"]), m.reason)
end

--- Poll the emergency state of every cluster the node knows (red: a Redis connection).
function _M.refresh(red)
    -- one app of each cluster (cfgcache.clusters: computed once per config generation)
    for _, a in ipairs(cfgcache.clusters()) do
        local v, err = red:hmget(a.k_l1, "emergency_mode", "emergency_until", "emergency_reason")
        if not v then
            return nil, err
        end
        _M.apply(a.cluster, v[1] == "1", tonumber(v[2]), v[3] ~= ngx.null and v[3] or nil)
    end
    return true
end

return _M
