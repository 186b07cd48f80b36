-- On-demand lookups of ids a full config_dict does not hold (apps, access keys, buckets: one
-- Redis HGET on the request path), kept cheap and harmless for ids nobody configured:
--   * a negative cache: an id Redis does not know is remembered as unknown for
--     TOLLGATE_LOOKUP_NEGATIVE_TTL seconds in the shared dict tollgate_lookup (bounded by its size:
--     the least recently used entries go first), so a repeated made-up id costs no Redis call;
--     what Redis does know is kept there as long, so that one lookup serves every worker;
--   * a budget: at most TOLLGATE_LOOKUP_RATE lookups per second and node (a counter per second in
--     the same dict); beyond it a request for an id the node does not hold is refused without
--     Redis, 503 SlowDown with Retry-After: 1 (ratelimit_config_lookups_refused_total), so a spray
--     of made-up ids cannot queue requests behind Redis round trips, and a real tenant the node
--     could not look up that second is told to retry, not that it does not exist;
--   * an id that cannot be looked up (Redis does not answer) is UNVERIFIED: the caller admits it,
--     if at all, from the one fail-open budget of unverified requests, never from a budget, an
--     active-set entry or a metric series of its own.
local floor = math.floor
local now = ngx.now

local _M = {}

--- The app id under which requests whose identity could not be verified are admitted in
--- fail-open (one budget, one series for all of them).
_M.UNVERIFIED = "_unverified"

--- The refusal reason of a request whose id the node could not look up for want of budget.
local BUDGET = "lookup_budget_exhausted"
_M.BUDGET = BUDGET

local ndict = ngx.shared.tollgate_lookup     -- nil in an nginx without the http include's dict
local cdict = ngx.shared.config_dict
local fetch                                 -- function(hash, field) -> value, false or nil, err
local RATE = 1000
local TTL = 5
local NEGATIVE = 0                          -- the dict's value of an id Redis does not know
-- a known id is remembered for as long as a node caches config (60 s; a change of the id forgets
-- it at once): a spray of made-up ids that spends the second's lookups must not make a tenant the
-- node already looked up wait for one again
local KNOWN_TTL = 60

--- Settings (tollgate.settings: lookup_rate, lookup_negative_ttl).
function _M.configure(conf)
    RATE = conf.lookup_rate or RATE
    TTL = conf.lookup_negative_ttl or TTL
end

--- Set the Redis read: fn(hash, field) returns the field's value, false when the field does not
--- exist, or nil, err.
function _M.set(fn)
    fetch = fn
end

--- true while the node's config_dict holds only part of the config (or a first load runs): an id
--- it does not hold may still exist.
function _M.partial()
    return (cdict:get("partial") or cdict:get("loading")) ~= nil
end

--- The value of `field` in Redis hash `hash` (kind: a short prefix naming the map, "a:", "k:" or
--- "b:"): the value; false when it does not exist or is remembered as unknown; nil,
--- "lookup_budget_exhausted" when the node's lookups of this second are spent (BUDGET); nil,
--- err when Redis did not answer.
function _M.get(kind, hash, field)
    if not fetch then
        return false
    end
    if ndict then
        local known = ndict:get(kind .. field)
        if known == NEGATIVE then
            cdict:incr("lookup_negative_hits", 1, 0)
            return false
        elseif known then
            return known
        end
        local n = ndict:incr("rate:" .. floor(now()), 1, 0, 2)
        if n and n > RATE then
            cdict:incr("lookups_refused", 1, 0)
            return nil, BUDGET
        end
    end
    local v, err = fetch(hash, field)
    if v == nil then
        cdict:incr("lookup_errors", 1, 0)
        return nil, err
    end
    cdict:incr("lookups", 1, 0)
    if ndict then
        -- for every worker of the node (evicts the oldest entries when full; a config change of
        -- the id forgets it: sync())
        ndict:set(kind .. field, v or NEGATIVE, v and KNOWN_TTL or TTL)
    end
    return v
end

--- Bring what the node remembers to config generation `v`, once per node (not once per worker:
--- a worker that starts or falls behind must not make the node forget, and look up again, ids
--- another worker already brought up to date). changed(from) names the ids the generations after
--- `from` changed ({ kind = { id = true } } with kinds "a:", "k:", "b:"), nil when anything may
--- have: those are forgotten, everything when nil.
function _M.sync(v, changed)
    if not ndict then
        return
    end
    local from = ndict:get("gen")
    if from == v then
        return
    end
    local ids = from and changed(from)
    if not ids then
        ndict:flush_all()
    else
        for kind, t in pairs(ids) do
            for id in pairs(t) do
                ndict:delete(kind .. id)
            end
        end
    end
    ndict:set("gen", v)
end

return _M
