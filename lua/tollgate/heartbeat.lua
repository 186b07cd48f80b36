-- The node's report (heartbeat): every TOLLGATE_REPORT_INTERVAL s, worker 0 writes this node's
-- state to the hash `ratelimit:gateways` (field: the node id; value: JSON), where the control
-- plane reads it for its cluster view, its alerts and its reconciliation: when it last
-- reported, the config version it enforces, its degradation level, cumulative request, refusal
-- and body byte totals per app (in: uploads, out: downloads), breaker states, leaked connection
-- slots and the last cleanup run. `reported_at` (ms precision) dates the counters, from which
-- the control plane derives each app's bytes/s on this node.
-- A node that stops reporting is stale after 30 s. Sent in the config poll's Redis round
-- (tollgate.config.watch), not a connection of its own.
local cfgcache = require("tollgate.config.cache")
local deg = require("tollgate.redis.degradation")
local metrics = require("tollgate.metrics")
local connlimit = require("tollgate.conn.limiter")
local breaker = require("tollgate.breaker.breaker")
local keys = require("tollgate.keys")
local cjson = require("cjson.safe")

local floor = math.floor
local next = next

local _M = {}

local conf
local last = 0

function _M.init(settings)
    conf = settings
end

--- The report, as the control plane reads it (controlplane/internal/live).
function _M.report(t)
    metrics.flush()
    local requests, blocked, apps = metrics.node_totals()
    local breakers = breaker.report()
    local leaked, cleanup_run = connlimit.leak_stats()
    return {
        node_id = conf.node_id,
        last_seen = floor(t),
        reported_at = floor(t * 1000) / 1000,
        config_version = cfgcache.version(),
        config_store_lost = cfgcache.store_lost(),
        mode = conf.mode,
        degradation_level = deg.level(),
        redis_latency_ms = deg.latency() * 1000,
        l3_hit_ratio = metrics.hit_ratio(),
        requests_total = requests,
        blocked_total = blocked,
        apps = next(apps) and apps or cjson.empty_table,
        breakers = next(breakers) and breakers or cjson.empty_table,
        conn_leaked_total = leaked,
        conn_cleanup_last_run = cleanup_run,
    }
end

--- Write the report on connection `red` if one is due at time t (s): true, or nil, err (the
-- connection must then not be pooled).
function _M.report_if_due(red, t)
    -- timers fire a little late, never early: a report interval equal to the poll interval
    -- must not skip every other poll
    if t - last < conf.report_interval - 0.01 then
        return true
    end
    last = t
    local ok, err = red:hset(keys.gateways(), conf.node_id, cjson.encode(_M.report(t)))
    if not ok then
        return nil, err
    end
    return true
end

return _M
