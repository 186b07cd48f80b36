-- The gateway's shared dicts: every dict's key layout in one table (LAYOUT, below), the
-- per-app key names of the local tier (L3, built once per app per worker) and the atomic
-- primitives every module uses on them.
local dict = ngx.shared.ratelimit

local _M = { dict = dict }

-- Every lua_shared_dict of nginx/tollgate_http.conf and every key it holds: { pattern, what,
-- the module that writes it }. <app>, <cluster>, <id>: ids; <g>: a generation or worker tag;
-- <n>: a number. t/lua/shm_spec.lua checks that this table names exactly the dicts the nginx
-- include declares and /metrics reports.
-- luacheck: push ignore 631 (one line per key)
_M.LAYOUT = {
    ratelimit = {
        { "app:<app>:<field>", "the app's local lease and its bookkeeping (fields: keys() below)", "tollgate.shm" },
        { "app:<app>:fail_open:<second>", "cost admitted fail-open in that second", "tollgate.lease.bucket" },
        { "em:<cluster>", "the cluster's emergency state", "tollgate.lease.emergency" },
        { "sync:visited", "apps the last sync tick visited", "tollgate.lease.sync" },
        { "rsv:mp:<app>:<md5 of path>, rsv:s:<n>, rsv:next, rsv:active, rsv:reserved", "multipart reservations: upload -> slot, slots, their totals", "tollgate.lease.reservation" },
        { "deg:level, deg:lat:<worker>", "degradation level, each worker's Redis latency", "tollgate.redis.degradation" },
        { "brk:open, brk:until", "the Redis breaker: open, and until when", "tollgate.redis.degradation" },
        { "redis:sentinel:<master>[:lock|:tick]", "Sentinel's master address, its refresh lock and tick", "tollgate.redis.sentinel" },
    },
    connlimit_dict = {
        { "ca:<app>, cc:<cluster>", "requests in flight", "tollgate.conn.limiter" },
        { "pa:<app>[:<n>], pc:<cluster>", "peaks (and their markers)", "tollgate.conn.limiter" },
        { "ra:<app>, rc:<cluster>, la:<app>, th:<app>", "rejected, force-released, above 90 % since the last event", "tollgate.conn.limiter" },
        { "leaked_total, cleanup_last_run", "node totals of the leak cleanup", "tollgate.conn.limiter" },
        { "lim:a:<app>, lim:c:<cluster>", "connection limits read from Redis", "tollgate.conn.config" },
        { "t:<g>:<n>, ts:<g>:<n>, ti:<g>:<n>, x:<key>@<stamp>, tg:<n>, tseq", "tracking records of requests in flight, their heartbeats, client IPs, claims, tags", "tollgate.conn.record" },
        { "wt:<g>, wp:<g>, wl:<g>, wseq", "the tracking workers: tag, pid, last heartbeat", "tollgate.conn.track" },
    },
    config_dict = {
        { "version, epoch, store_lost, store_lost_total", "the config version held, the store's epoch, whether the store was lost", "tollgate.config.load" },
        { "generation, chg:<g>", "the config generation and the journal of what each changed", "tollgate.config.cache" },
        { "app:<app>, rule:<id>, rule_ids, breakers", "app configs, rules, their ids, breaker configs (JSON)", "tollgate.config.load" },
        { "ak:<access key id>, bk:<bucket>", "the app of an S3 access key, of a bucket", "tollgate.config.load" },
        { "clusters", "the clusters of the configured apps", "tollgate.config.cache" },
        { "partial, loading", "the dict holds only part of the apps; a first load under way", "tollgate.config.load" },
        { "errors, full_loads, changes_applied, zone_full_total, cache_wipes, lookups, lookup_errors, lookups_refused, lookup_negative_hits, conn_full_reads", "counters of /metrics' ratelimit_config_*", "tollgate.config.load" },
    },
    tollgate_active = {
        { "<app>", "the app has local state on this node (what the timers visit)", "tollgate.lease.active" },
        { ":q, :overflow", "apps newly active (a queue); the dict was full", "tollgate.lease.active" },
    },
    tollgate_metrics = {
        { "<series>{<labels>}", "a Prometheus counter or gauge", "tollgate.metrics" },
        { "<histogram>\\0<bucket|sum|count>", "histogram parts (keys with a NUL are never rendered)", "tollgate.metrics" },
        { "node\\0req\\0<app>, node\\0blk\\0<app>, node\\0apps, flushes\\0<worker>", "node totals of the report, the queue of their apps, flushes done", "tollgate.metrics" },
    },
    tollgate_rules = {
        { "<rule>:<scope key>[:<window>]", "node rule counters (fixed and sliding windows, token buckets)", "tollgate.rules.local" },
        { "gx:, gl:, gi:, gn:, gr:, gf:<rule>:<scope key>", "a global rule's local lease: valid until, units left, lease id, next, refill, failing", "tollgate.rules.global" },
        { "p:<series>", "the rule hit counters last pushed to Redis", "tollgate.rules.check" },
    },
    tollgate_events = {
        { "q", "the queue of events waiting for the Redis stream", "tollgate.events" },
        { "f:<type>:<app>, r:<second>", "events folded into the next one, events written per second", "tollgate.events" },
    },
    tollgate_breakers = {
        { "<K>|e, <K>|x|<ep>, <K>|w|<ep>|<i>, <K>|h|<ep>, <K>|s|<ep>, <K>|at, <K>|lf, <K>|tq, <K>|tf", "a backend breaker's state, window and probes (layout: tollgate.breaker.breaker)", "tollgate.breaker.breaker" },
        { "k|<K>, kq<worker>", "breakers used on this node, and each worker's queue of them", "tollgate.breaker.breaker" },
    },
    tollgate_lookup = {
        { "a:<app>, k:<access key id>, b:<bucket>", "on-demand lookups of ids a full config_dict does not hold: the answer (0: unknown) for TOLLGATE_LOOKUP_NEGATIVE_TTL (evicts)", "tollgate.config.lookup" },
        { "rate:<second>", "lookups this node made in that second (TOLLGATE_LOOKUP_RATE)", "tollgate.config.lookup" },
    },
    tollgate_authfail = {
        { "<client ip>", "requests the backend refused as unauthenticated in the last minute (evicts)", "tollgate.request.log" },
    },
}
-- luacheck: pop

local cache = {}
local cache_n = 0

--- Local key names of app `id` (the layout of docs/design.md §4).
function _M.keys(id)
    local k = cache[id]
    if k then
        return k
    end
    local p = "app:" .. id .. ":"
    k = {
        id = id,
        tokens = p .. "tokens",                 -- lease held by this node
        pending = p .. "pending",               -- lease admissions not yet reported (packed)
        pending_cost = p .. "pending_cost",     -- other consumption not yet reported
        pending_count = p .. "pending_count",   -- requests not yet reported (spilled)
        debt = p .. "debt",                     -- post-hoc charges the lease could not cover
        target = p .. "target",                 -- adaptive reserve target
        neg = p .. "neg",                       -- negative cache: reset time while exhausted
        neg_reason = p .. "neg_reason",         -- the reason L2 gave
        neg_need = p .. "neg_need",             -- the smallest need L2 refused meanwhile
        scarce = p .. "scarce",                 -- L2 could not fill the last request
        nodes = p .. "nodes",                   -- active nodes of the app, from the last grant
        refill_lock = p .. "refill_lock",
        sync_lock = p .. "sync_lock",
        seq = p .. "seq",                       -- last report sequence number
        inflight = p .. "inflight",             -- report sent but not yet acknowledged
        reported = p .. "reported",             -- total cost reported (rate estimation)
        rollback_count = p .. "rollback_count",
        fail_open = p .. "fail_open",           -- cost admitted while Redis was unavailable
        give_back = p .. "give_back",           -- tokens taken from the lease, due back to L2
    }
    if cache_n > 50000 then
        cache, cache_n = {}, 0
    end
    cache[id] = k
    cache_n = cache_n + 1
    return k
end

-- Unreported consumption. An admission from the lease moves the cost and the request count
-- in one `incr` of the packed counter `pending` = cost * 2^20 + count, whose count part is read
-- as a signed number in [-2^19, 2^19) (rollbacks subtract). Post-hoc charges and refunds go to
-- `pending_cost`, and a packed value about to leave the exact range spills its parts into
-- `pending_cost` / `pending_count`; a report takes all three.
local PACK = 1048576
local HALF = 524288
_M.PACK = PACK

--- cost, count of packed pending value p
local function unpack_pending(p)
    local n = p % PACK
    if n >= HALF then
        n = n - PACK
    end
    return (p - n) / PACK, n
end
_M.unpack_pending = unpack_pending

-- spill when the count part leaves [0, 2^18) or the cost part |c| reaches 2^30 (doubles stay
-- exact up to 2^53 = 2^33 * 2^20)
local SPILL_COUNT = 262144
local SPILL_ABS = 2 ^ 50

--- Count an admission (cost, +1) or its rollback (-cost, -1). Returns the requests pending.
function _M.add_pending(k, cost, count)
    local p = dict:incr(k.pending, cost * PACK + count, 0)
    if not p then
        return 0
    end
    local n = p % PACK
    if n < SPILL_COUNT and p < SPILL_ABS and p > -SPILL_ABS then
        return n
    end
    -- move exactly what this incr saw; concurrent increments stay in the packed counter
    local c
    c, n = unpack_pending(p)
    dict:incr(k.pending, -p, 0)
    dict:incr(k.pending_cost, c, 0)
    return dict:incr(k.pending_count, n, 0) or 0
end

--- Take all unreported consumption of app keys k: cost, count (zero, zero when none).
function _M.take_pending(k)
    local p = dict:get(k.pending) or 0
    local pc = dict:get(k.pending_cost) or 0
    local pn = dict:get(k.pending_count) or 0
    if p ~= 0 then
        dict:incr(k.pending, -p)
    end
    if pc ~= 0 then
        dict:incr(k.pending_cost, -pc)
    end
    if pn ~= 0 then
        dict:incr(k.pending_count, -pn)
    end
    local c, n = unpack_pending(p)
    return pc + c, pn + n
end

--- Unreported consumption of app keys k without taking it: cost, count.
function _M.peek_pending(k)
    local c, n = unpack_pending(dict:get(k.pending) or 0)
    return c + (dict:get(k.pending_cost) or 0), n + (dict:get(k.pending_count) or 0)
end

--- Take up to `amount` from counter `key` of shared dict `store` (the ratelimit dict when nil)
-- without leaving it negative; returns what was taken. Works under concurrency: an
-- overdraw is given back by the operation that caused it.
function _M.take(key, amount, store)
    if amount <= 0 then
        return 0
    end
    store = store or dict
    local v = store:incr(key, -amount, 0)
    if not v then
        return 0
    end
    if v >= 0 then
        return amount
    end
    local back = -v
    if back > amount then
        back = amount
    end
    store:incr(key, back)
    return amount - back
end

--- Take exactly `amount` from counter `key` of the ratelimit dict, or nothing.
function _M.take_all_or_nothing(key, amount)
    local v = dict:incr(key, -amount, 0)
    if v and v >= 0 then
        return true, v
    end
    if v then
        dict:incr(key, amount)
    end
    return false
end

return _M
