-- Rules (docs/rules-contract.md §2): per worker, the rule set of the current config generation
-- compiled once (checked, sorted by priority then id, indexed by app, method, bucket and
-- header values: tollgate.rules.index), then checked for each request after the connection
-- limiter and before the tiers: a request walks only the rules the index gives it. Without
-- rules a request pays one comparison (the generation comes from cfgcache.on_generation, not
-- from the dict). The headers rules match on are read with the request path's own
-- (reqheaders.want), not by reading every header.
-- The counters live in the tollgate_rules dict (node rules) or in Redis (global rules,
-- rules_global); the hits/actions counters are metrics series, pushed to
-- `ratelimit:rules:stats` by worker 0 about every second.
local parse = require("tollgate.rules.parse")
local algo = require("tollgate.rules.local")
local global = require("tollgate.rules.global")
local metrics = require("tollgate.metrics")
local keys = require("tollgate.keys")
local scripts = require("tollgate.redis.scripts")
local events = require("tollgate.events")
local cfgcache = require("tollgate.config.cache")
local reqheaders = require("tollgate.request.headers")
local index = require("tollgate.rules.index")
local match = require("tollgate.rules.match")

local cdict = ngx.shared.config_dict
local rdict = ngx.shared.tollgate_rules
local mdict = ngx.shared.tollgate_metrics
local var = ngx.var
local now = ngx.now
local start_time = ngx.req.start_time
local sleep = ngx.sleep
local sort = table.sort
local clear_tab = require("table.clear")
local type = type
local matches = match.matches

local _M = {}

local conf, redis_client, redis_scripts
local gen = false             -- generation of the compiled set
local current = nil           -- the generation this worker serves (cfgcache.on_generation)
local all = {}                -- every enabled rule, in order
local ix = index.new(all, function() return false end)

-- Header names the request path reads for the rules (reqheaders.want; at most WANT_MAX long,
-- its limit). A name wanted at time T is in the headers table of every request that started
-- after T; an older request (its headers read before) reads the wanted names again, for
-- WANT_GRACE seconds (far longer than a request's access phase waits for anything before the
-- rules).
local WANT_MAX = 64
local WANT_GRACE = 60
local wanted = {}
local want_since = nil

local function indexed(name)
    return #name <= WANT_MAX
end

local function want(name)
    if #name <= WANT_MAX and not wanted[name] then
        reqheaders.want(name)
        wanted[name] = true
        want_since = now()
    end
end

local ACTIONS = { "blocked", "throttled", "shadowed", "fail_open" }

function _M.init(settings, client, script_set)
    conf, redis_client, redis_scripts = settings, client, script_set
    match.init(settings)
    global.init(settings, client, script_set)
    algo.set_workers(ngx.worker.count() or 1)
end

local function compile(g)
    local list = {}
    for _, r in ipairs(parse.stored(cdict)) do
        if r.enabled then
            r.s_hits = 'ratelimit_rule_hits_total{rule_id="' .. r.id .. '"}'
            r.s_act = {}
            for _, a in ipairs(ACTIONS) do
                r.s_act[a] = 'ratelimit_rule_actions_total{rule_id="' .. r.id
                    .. '",action="' .. a .. '"}'
            end
            r.k_local = r.id .. ":"
            r.k_cache, r.k_n = {}, 0          -- scope key -> dict key of the counter
            r.is_global = r.distribution == "global"
            r.is_cost = r.unit == "cost"
            r.k_global = keys.rule_counter(r.id) .. r.algorithm .. ":"
            r.fn = (r.algorithm == "fixed_window" and algo.fixed)
                or (r.algorithm == "sliding_window" and algo.sliding) or algo.token
            if r.headers then
                for i = 1, #r.headers do
                    want(r.headers[i][1])
                end
            end
            if r.user_header then
                want(r.user_header)
            elseif r.user_s3 then
                want("authorization")
            end
            list[#list + 1] = r
        end
    end
    sort(list, index.before)
    all, ix, gen = list, index.new(list, indexed), g
end

-- A request reaches check() only after cfgcache.app/cached saw this worker on the current
-- generation, which calls this first: the hot path compares two Lua values, no dict read.
-- A generation that changed no rule keeps the compiled set (and its memo) as it is.
cfgcache.on_generation(function(g, drop)
    if drop and not drop.rule and gen == current then
        gen = g
    end
    current = g
end)

--- The compiled rules of this worker (recompiled when the config generation moved).
function _M.list()
    local g = cfgcache.generation()
    if g ~= gen then
        compile(g)
    end
    return all
end

-- Within WANT_GRACE of a new wanted name (t: now): a request that started no later than that
-- read its headers before, so it reads the names the rules want now (all() would not: it adds
-- only the names nobody wants).
local scratch = {}
local function headers_before_want(headers, t)
    if t > want_since + WANT_GRACE then
        want_since = nil
    elseif start_time() <= want_since then
        reqheaders.read(scratch)
        for name in pairs(wanted) do
            if headers[name] == nil then
                headers[name] = scratch[name]
            end
        end
        clear_tab(scratch)
    end
end

-- rule_triggered event (docs/rules-contract.md §5); the table is built only when sampling keeps it
local function triggered(r, action, skey, method, remaining)
    local req = match.req
    local sampled = events.take("rule_triggered", req.app, r.id)
    if not sampled then
        return
    end
    local ua = reqheaders.all(req.headers)["user-agent"]
    events.push({
        event_type = "rule_triggered", severity = action == "blocked" and "warning" or "info",
        app_id = req.app, user_id = r.scope == "user" and skey or nil,
        ip_address = (match.client_ip()), user_agent = type(ua) == "string" and ua or nil,
        endpoint = var.uri, http_method = method, request_id = var.request_id,
        rule_id = r.id, rule_type = r.algorithm, limit_value = r.limit,
        current_usage = r.limit - (remaining or 0), action_taken = action,
        response_code = action == "blocked" and 429 or nil, reason = "rule_limited",
    }, sampled)
end

-- The dict key of rule r's counter for scope key skey (built once per worker).
local function local_key(r, skey)
    local k = r.k_cache[skey]
    if not k then
        if r.k_n >= 10000 then
            r.k_cache, r.k_n = {}, 0
        end
        k = r.k_local .. skey
        r.k_cache[skey] = k
        r.k_n = r.k_n + 1
    end
    return k
end

--- Check the rules of a request of app `a` (method, headers, cost = the known tier cost).
-- Returns nil to go on (possibly after a throttle delay) or the rejecting rule, retry_after
-- (seconds) and remaining; or the rule, nil, nil and a header's name when the request repeats
-- the header that rule takes its user from (the caller refuses it with 400).
function _M.check(a, method, headers, cost)
    if current ~= gen then
        compile(current)
    end
    if #all == 0 then
        return nil
    end
    local id = a.id
    match.begin(headers, id)
    local t = now()
    if want_since and ix.headers then
        headers_before_want(headers, t)
    end
    local list = index.lookup(ix, id, method, match.bucket, headers)
    if #list == 0 then
        return nil
    end
    if list.need_all then
        reqheaders.all(headers)     -- a header name too long to be wanted
    end
    for i = 1, #list do
        local r = list[i]
        if (not r.effective_from or t >= r.effective_from)
                and (not r.effective_to or t < r.effective_to) then
            local skey, dup = matches(r)
            if dup and r.action ~= "shadow" then
                metrics.inc(r.s_hits)
                metrics.inc(r.s_act.blocked)
                return r, nil, nil, dup
            end
            if skey then
                metrics.inc(r.s_hits)
                local units = r.is_cost and cost or 1
                local max_delay = r.max_delay or 0
                local ok, delay, retry, remaining, slept, failed_open
                local yielded = false
                if r.is_global then
                    ok, delay, retry, remaining, slept, failed_open =
                        global.acquire(r, skey, units, max_delay, t)
                    yielded = global.yielded
                else
                    -- node algorithms never yield but for a throttled sliding window, which
                    -- reports it (slept); the token bucket takes no lock (rules_local.token)
                    ok, delay, retry, remaining, slept =
                        r.fn(rdict, local_key(r, skey), r, units, t, max_delay, sleep, now)
                end
                if failed_open then
                    metrics.inc(r.s_act.fail_open)
                elseif not ok then
                    if r.action ~= "shadow" then
                        metrics.inc(r.s_act.blocked)
                        triggered(r, "blocked", skey, method, remaining)
                        return r, retry, remaining
                    end
                    metrics.inc(r.s_act.shadowed)
                    triggered(r, "shadowed", skey, method, remaining)
                elseif delay > 0 or slept then
                    metrics.inc(r.s_act.throttled)
                    triggered(r, "throttled", skey, method, remaining)
                    if delay > 0 then
                        sleep(delay)
                    end
                end
                if slept or delay > 0 or yielded then
                    -- this request yielded: other requests of the worker used `req`
                    match.begin(headers, id)
                    t = now()
                end
            end
        end
    end
    return nil
end

local last_push = 0

--- Worker 0, about every second: add the rule counters' growth since the last push to
-- `ratelimit:rules:stats` (one script call). The pushed values live in the tollgate_rules
-- dict, so a reload of nginx neither loses nor repeats a delta.
function _M.push_stats()
    local t = now()
    if t - last_push < 1 then
        return
    end
    last_push = t
    metrics.flush()
    local args, pushed = {}, {}
    for _, r in ipairs(_M.list()) do
        local series = { r.s_hits, r.s_act.blocked, r.s_act.throttled, r.s_act.shadowed,
                         r.s_act.fail_open }
        local names = { "hits", "blocked", "throttled", "shadowed", "fail_open" }
        for j = 1, #series do
            local cur = mdict:get(series[j]) or 0
            local d = cur - (rdict:get("p:" .. series[j]) or 0)
            if d > 0 then
                args[#args + 1] = r.id .. ":" .. names[j]
                args[#args + 1] = d
                pushed[#pushed + 1] = { series[j], cur }
            end
        end
    end
    if #args == 0 then
        return
    end
    local res, err = redis_client:with(conf.bg_timeout_ms, function(red)
        return scripts.run(red, redis_scripts.rule_stats, 1, keys.rule_stats(), unpack(args))
    end)
    if not res then
        ngx.log(ngx.WARN, "tollgate: rule stats push failed: ", err)
        return
    end
    for i = 1, #pushed do
        rdict:set("p:" .. pushed[i][1], pushed[i][2])
    end
end

return _M
