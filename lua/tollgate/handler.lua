-- nginx phase entry points of tollgate. Everything else lives in the modules this one wires.
--   init()        init_by_lua:        settings, scripts read from disk
--   init_worker() init_worker_by_lua: Redis client, timers (worker 0: sync, config watch)
--   access()      access_by_lua:      identify, classify, connection slot, cost, rules, L3
--                                     acquire or 4xx
--   body()        body_filter_by_lua: downloads charged as they flow, paced (tollgate.request.pace)
--   log()         log_by_lua:         post-hoc charges, rollback of cancelled requests, metrics
--   health(), metrics()               content handlers, never limited
local cfgcache = require("tollgate.config.cache")
local settings = require("tollgate.settings")
local lookup = require("tollgate.config.lookup")
local cost_mod = require("tollgate.cost")
local scripts = require("tollgate.redis.scripts")
local rredis = require("tollgate.redis.client")
local metrics = require("tollgate.metrics")
local l3 = require("tollgate.lease.bucket")
local sync = require("tollgate.lease.sync")
local watch = require("tollgate.config.watch")
local deg = require("tollgate.redis.degradation")
local connlimit = require("tollgate.conn.limiter")
local reservation = require("tollgate.lease.reservation")
local rules = require("tollgate.rules.check")
local events = require("tollgate.events")

local reqheaders = require("tollgate.request.headers")
local identity = require("tollgate.identity")
local sigsecrets = require("tollgate.s3.sigsecrets")
local access = require("tollgate.request.access")
local log_phase = require("tollgate.request.log")
local pace = require("tollgate.request.pace")
local errorpage = require("tollgate.s3.errorpage")

local cjson = require("cjson.safe")

-- The build's version: tollgate_build.lua next to the tollgate/ directory, written by the
-- gateway renders (scripts/render-gateway.sh, the test harness), make install and make dist
-- (scripts/version.sh); "dev" without it.
local VERSION = "dev"
do
    local ok, build = pcall(require, "tollgate_build")
    if ok and type(build) == "table" and type(build.version) == "string" then
        VERSION = build.version
    end
end

local _M = {}

local conf, redis_scripts, redis_client, calculator


-- LuaJIT limits for the request path. access() is one long function whose shared-dict calls
-- LuaJIT inlines into a single trace; with the VM's defaults that trace aborts ("loop unroll
-- limit reached", "trace too long"), gets blacklisted and the whole path runs in the
-- interpreter. Measured with `go run ./bench/cmd/tollgate-callgrind`: the access phase drops
-- from about 32k to 23k instructions per request with these limits. They are VM-wide, so an nginx
-- that runs other Lua can keep its own with TOLLGATE_JIT_TUNE=off.
local JIT_LIMITS = { "maxrecord=20000", "maxirconst=2000", "maxsnap=1000", "loopunroll=60" }

local function tune_jit(mode)
    if mode == "on" and jit and jit.opt then
        jit.opt.start(unpack(JIT_LIMITS))
    end
end

function _M.init(opts)
    conf = settings.get(opts)
    tune_jit(conf.jit_tune)
    -- the config generation's mirror, mapped before the workers fork (a plain read per request)
    local _, gerr = cfgcache.share_generation()
    if gerr then
        ngx.log(ngx.WARN, "tollgate: no shared page for the config generation (", gerr,
            "); every request reads it from config_dict")
    end
    connlimit.configure(conf)
    local set, err = scripts.load(conf.scripts_dir)
    if not set then
        error("tollgate: " .. err, 0)
    end
    redis_scripts = set
    local costs = conf.costs
    if costs == nil then
        local perr
        costs, perr = cost_mod.parse_list(conf.cost_list)
        if not costs then
            error("tollgate: TOLLGATE_COSTS: " .. perr, 0)
        end
    end
    local calc, cerr = cost_mod.new({ base = costs }, conf.chunked_estimate)
    if not calc then
        error("tollgate: " .. cerr, 0)
    end
    calculator = calc
    identity.configure(conf)
    sigsecrets.configure(conf.secrets_key_file)
    access.configure(calculator, identity.DOMAINS[1] and identity.DOMAINS or nil, conf)
    log_phase.configure(conf, calculator)
    pace.configure(conf, calculator)
    -- the headers the request path reads (identity, price, reservation estimates); rules and
    -- events read the rest through reqheaders.all
    reqheaders.want(conf.app_header:lower())
    for _, name in ipairs({ "transfer-encoding", "content-length", "x-amz-copy-source",
                            "x-tollgate-expected-size", "x-amz-decoded-content-length",
                            "range" }) do
        reqheaders.want(name)
    end
    for _, name in ipairs(identity.headers()) do
        reqheaders.want(name)
    end
    if conf.trusted_proxies and #conf.trusted_proxies > 0 then
        -- the client address of the auth-failure budget and the per-address slot share
        reqheaders.want("x-forwarded-for")
    end
end

-- TOLLGATE_JIT_LOG: this worker's LuaJIT trace log (jit.v) in <path>.<pid>, for diagnosis
-- (docs/development.md); a log that cannot be opened is a warning, never a failed start.
local function jit_log(path)
    if path == "" or not jit then
        return
    end
    local file = path .. "." .. ngx.worker.pid()
    local ok, v = pcall(require, "jit.v")
    local f = ok and io.open(file, "w")
    if not f then
        ngx.log(ngx.WARN, "tollgate: TOLLGATE_JIT_LOG: cannot write ", file,
            ok and "" or " (no jit.v module)")
        return
    end
    f:close()
    v.on(file)
end

-- The timers' code runs in LuaJIT's interpreter (TOLLGATE_JIT_TUNE=on): it runs a few times a
-- second, and compiling it made the request path's cost differ from run to run. Its loops and
-- closures abort traces, and every abort sets a randomised retry; its hot counters share
-- LuaJIT's 64 slots with the request path's (which function got compiled first, and where the
-- request path's traces started and ended, depended on when the timers fired); and its calls
-- into the functions both share (the shared-dict wrappers) grew chains of side traces off the
-- request path's traces. Interpreted functions count nothing and start no trace.
local function interpreted(fn)
    if jit and conf.jit_tune == "on" then
        jit.off(fn, true)
    end
    return fn
end

local TIMER_FUNCTIONS = {
    metrics.flush, metrics.note_lua_memory, cfgcache.publish_generation, deg.publish,
    deg.evaluate, reservation.sweep, sync.tick, sync.flush, rules.push_stats,
    require("tollgate.lease.active").each, require("tollgate.lease.active").list,
    require("tollgate.lease.active").forget, require("tollgate.conn.track").heartbeat,
    connlimit.cleanup, connlimit.report,
}

function _M.init_worker()
    if not conf then
        _M.init()
    end
    jit_log(conf.jit_log)
    -- (and what only they call; the Redis client's with/release: timers' reports, refills and
    -- the rare grant of a request whose lease is empty)
    for _, list in ipairs({ TIMER_FUNCTIONS, sync.TIMER_HELPERS, metrics.TIMER_HELPERS,
                            l3.TIMER_HELPERS, require("tollgate.lease.active").TIMER_HELPERS,
                            deg.TIMER_HELPERS, { rredis.with, rredis.release } }) do
        for i = 1, #list do
            interpreted(list[i])
        end
    end
    deg.init(conf)
    deg.start()
    cfgcache.on_generation(identity.flush)
    cfgcache.on_generation(sigsecrets.flush)
    cfgcache.publish_generation(true)
    local client, err = rredis.new({
        url = conf.redis_url, pool_size = conf.pool_size,
        on_start = deg.mark,
        on_result = function(rerr, unavailable, sec, mark)
            metrics.redis_latency(sec)
            local stalled = deg.stalled(sec, mark)
            deg.observe(sec - stalled)
            -- a timeout that is mostly this worker's own stall says nothing about Redis
            deg.result(rerr, unavailable and stalled < sec / 2)
        end,
    })
    if not client then
        error("tollgate: " .. err, 0)
    end
    redis_client = client
    -- Sentinel master / cluster slot map upkeep
    local ok, serr = redis_client:start(conf.bg_timeout_ms)
    if not ok then
        ngx.log(ngx.ERR, "tollgate: cannot start redis topology upkeep: ", serr)
    end
    l3.init(conf, redis_client, redis_scripts)
    sync.init(conf, redis_client, redis_scripts)
    reservation.init(conf)
    rules.init(conf, redis_client, redis_scripts)
    watch.init(conf, redis_client)
    -- apps, keys and buckets a full config_dict has no room for: one HGET on the request path,
    -- bounded and negatively cached (tollgate.config.lookup)
    lookup.configure(conf)
    lookup.set(function(hash, field)
        return redis_client:with(conf.op_timeout_ms, function(red)
            local v, herr = red:hget(hash, field)
            if not v then
                return nil, herr
            end
            return v ~= ngx.null and v or false
        end)
    end)
    events.init(conf, redis_client)
    connlimit.start(conf, redis_client)
    ngx.timer.every(1, interpreted(function(premature)
        if premature then
            sync.flush()   -- stopping: unreported consumption, debt and leases back to L2
            return
        end
        metrics.flush()
        metrics.note_lua_memory()
        cfgcache.publish_generation()
    end))
    local worker0 = ngx.worker.id() == 0
    ngx.timer.every(0.25, interpreted(function(premature)
        if not premature then
            deg.publish()
            if worker0 then
                deg.evaluate()
            end
        end
    end))
    if worker0 then
        ngx.timer.every(math.min(10, conf.reservation_timeout / 2), interpreted(function(premature)
            if not premature then
                reservation.sweep()
            end
        end))
        ngx.timer.every(conf.sync_interval, interpreted(function(premature)
            if not premature then
                sync.tick()
                rules.push_stats()      -- at most once a second
            end
        end))
        watch.start()
        events.start(1)
    end
end


function _M.health()
    ngx.header["Content-Type"] = "application/json"
    local lost = cfgcache.store_lost()
    ngx.print(cjson.encode({
        -- 200 either way: the gateway keeps enforcing its last good config and must stay in
        -- its load balancer; the status says what monitoring must see
        status = lost and "config_store_lost" or "ok",
        reason = lost and (lost .. ": the config store is not the one this gateway knew; "
            .. "serving the last good config until it is restored") or nil,
        node_id = conf.node_id,
        redis = deg.is_open() and "unavailable" or "ok",
        degradation_level = deg.level(),
        config_version = cfgcache.version(),
        config_epoch = cfgcache.epoch(),
        mode = conf.mode,
        version = VERSION,
    }))
end

--- access_by_lua (tollgate.request.access) and log_by_lua (tollgate.request.log).
_M.access = access.run
_M.log = log_phase.run
--- body_filter_by_lua (tollgate.request.pace).
_M.body = pace.run
--- content_by_lua of nginx/tollgate_s3_errors.conf's error pages (tollgate.s3.errorpage).
_M.s3_error = errorpage.run

-- Each module adds the gauges it owns (metrics.add_gauges); this one adds the build's.
function _M.metrics()
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.print(metrics.render({
        ['tollgate_build_info{component="gateway",node_id="' .. conf.node_id .. '",version="'
            .. VERSION .. '"}'] = 1,
    }))
end

--- The build's version (tollgate_build.lua, else "dev").
function _M.version()
    return VERSION
end

function _M.settings()
    return conf
end

function _M.calculator()
    return calculator
end

return _M
