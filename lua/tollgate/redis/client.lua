-- Redis connections for the gateway: one keepalive pool per address, a hard timeout on every
-- path a request waits on, failure classification, and the topology named by the URL:
--   redis://[:password@]host:port[/db]                                       one server
--   redis-sentinel://[:password@]host:port[,host:port...]/<master-name>[/db] Sentinel's master
--   redis-cluster://[:password@]host:port[,host:port...]                     Redis Cluster
-- `with(timeout_ms, fn, ...)` calls fn(red, ...) where red is a connection (one server, the
-- Sentinel master) or a cluster handle routing each command by its key's slot.
-- Works with OpenResty's resty.redis and Debian's nginx.redis (lua-resty-redis 0.27, which has
-- set_timeout but no set_timeouts).
local ok_resty, redis_lib = pcall(require, "resty.redis")
if not ok_resty then
    redis_lib = require("nginx.redis")
end
local sentinel = require("tollgate.redis.sentinel")
local cluster = require("tollgate.redis.cluster")
local redis_url = require("tollgate.redis.url")

local now = ngx.now
local update_time = ngx.update_time
local find = string.find
local sub = string.sub
local match = string.match
local tonumber = tonumber

local _M = { lib = redis_lib }
local mt = { __index = _M }

-- Replies meaning "this server cannot serve us now": the connection is closed, never pooled.
local UNAVAILABLE = { "READONLY", "NOREPLICAS", "OOM", "MISCONF", "LOADING", "MASTERDOWN",
                      "CLUSTERDOWN" }

_M.parse_url = redis_url.parse

--- A client. opts: url, pool_size (50), keepalive_ms (60000), on_result (function(err|nil,
-- unavailable, seconds, mark)), on_start (function() returning the mark given to on_result).
function _M.new(opts)
    local u, err = _M.parse_url(opts.url)
    if not u then
        return nil, err
    end
    local self = setmetatable({
        db = u.db,
        user = u.user,
        password = u.password,
        pool_size = opts.pool_size or 50,
        keepalive_ms = opts.keepalive_ms or 60000,
        on_result = opts.on_result,
        on_start = opts.on_start,
        pool_suffix = ":" .. u.db .. ":"
            .. (u.password and ngx.md5((u.user or "") .. ":" .. u.password) or ""),
        targets = {},
    }, mt)
    if u.kind == "single" then
        self.fixed = self:target_of(u.hosts[1].host .. ":" .. u.hosts[1].port)
    elseif u.kind == "sentinel" then
        self.sentinel, err = sentinel.new({ lib = redis_lib, sentinels = u.hosts,
            master_name = u.master_name, dict = ngx.shared.ratelimit })
    else
        self.cluster = cluster.new(self, u.hosts)
    end
    if err then
        return nil, err
    end
    return self
end

--- Background upkeep of the topology (Sentinel master, cluster slot map): now and then every
-- `refresh_every` seconds. Call in init_worker.
function _M.start(self, timeout_ms)
    local topo = self.sentinel or self.cluster
    if not topo then
        return true
    end
    local function tick(premature)
        if not premature then
            topo:tick(timeout_ms)
        end
    end
    local ok, err = ngx.timer.at(0, tick)
    if ok then
        ok, err = ngx.timer.every(topo.refresh_every, tick)
    end
    return ok, err
end

--- The connection target of "host:port" (pool named by address, db and credentials).
function _M.target_of(self, addr)
    local t = self.targets[addr]
    if not t then
        local host, port = match(addr, "^(.*):(%d+)$")
        t = { host = host, port = tonumber(port), pool = "tollgate:" .. addr .. self.pool_suffix }
        self.targets[addr] = t
    end
    return t
end

--- Connect to target t with a timeout (ms) applied to connect, send and read.
function _M.connect_to(self, t, timeout_ms)
    local red = redis_lib:new()
    red:set_timeout(timeout_ms)
    local ok, err = red:connect(t.host, t.port, { pool = t.pool, pool_size = self.pool_size })
    if not ok then
        return nil, "redis_connection_failed: " .. t.host .. ":" .. t.port .. ": " .. tostring(err)
    end
    if red:get_reused_times() == 0 then
        if self.password then
            local res, aerr
            if self.user then
                res, aerr = red:auth(self.user, self.password)
            else
                res, aerr = red:auth(self.password)
            end
            if not res then
                red:close()
                return nil, "redis_auth_failed: " .. tostring(aerr)
            end
        end
        if self.db ~= 0 then
            local res, serr = red:select(self.db)
            if not res then
                red:close()
                return nil, "redis_select_failed: " .. tostring(serr)
            end
        end
    end
    return red
end

--- A plain connection: to the server, the Sentinel master, or the cluster master of `key` (any
-- master without a key; cluster pub/sub reaches every node). The caller closes or releases it.
function _M.connect(self, timeout_ms, key)
    local t = self.fixed
    if not t then
        local addr, err
        if self.sentinel then
            addr, err = self.sentinel:master(timeout_ms)
        else
            addr, err = self.cluster:addr(key, timeout_ms)
        end
        if not addr then
            return nil, "redis_connection_failed: " .. tostring(err)
        end
        t = self:target_of(addr)
    end
    local red, err = self:connect_to(t, timeout_ms)
    if not red then
        self:failed()
    end
    return red, err
end

function _M.release(self, red)
    red:set_keepalive(self.keepalive_ms, self.pool_size)
end

--- The server failed us (connection error or an unavailable reply): with Sentinel, ask for the
-- master again; with a cluster, reload the slot map.
function _M.failed(self)
    if self.sentinel then
        self.sentinel:invalidate()
    elseif self.cluster then
        self.cluster:stale()
    end
end

--- Is this error a sign that Redis is unavailable (as opposed to a script/logic error)?
function _M.is_unavailable(err)
    if not err then
        return false
    end
    if err == "timeout" or find(err, "timeout", 1, true) or find(err, "closed", 1, true)
            or find(err, "refused", 1, true) or find(err, "redis_connection_failed", 1, true) then
        return true
    end
    for i = 1, #UNAVAILABLE do
        if sub(err, 1, #UNAVAILABLE[i]) == UNAVAILABLE[i] then
            return true
        end
    end
    return false
end
local is_unavailable = _M.is_unavailable

--- The first error among a pipeline's replies, or nil. commit_pipeline reports a command's
-- error (READONLY from a replica, OOM, ...) as a {false, err} entry, not as its own error: a
-- caller that returns the replies as they are makes with() pool a connection it must close.
function _M.pipeline_error(res)
    for i = 1, #res do
        local r = res[i]
        if type(r) == "table" and r[1] == false then
            return r[2]
        end
    end
    return nil
end

local function report(self, err, unavailable, t0, mark)
    if self.on_result then
        update_time()
        self.on_result(err, unavailable, now() - t0, mark)
    end
end

--- Run fn(red, ...) with timeout_ms on every round trip; returns fn's results or nil, err.
-- A connection goes back to its pool only when fn succeeded or failed with a logic error.
function _M.with(self, timeout_ms, fn, ...)
    update_time()
    local t0 = now()
    local mark = self.on_start and self.on_start()
    if self.cluster then
        local h = self.cluster:handle(timeout_ms)
        local res, ferr = fn(h, ...)
        h:finish()   -- failed connections were closed when they failed
        local unavailable = not res and is_unavailable(ferr)
        report(self, not res and ferr or nil, unavailable, t0, mark)
        if unavailable then
            return nil, ferr
        end
        return res, ferr
    end
    local red, err = self:connect(timeout_ms)
    if not red then
        report(self, err, true, t0, mark)
        return nil, err
    end
    local res, ferr = fn(red, ...)
    local unavailable = not res and is_unavailable(ferr)
    report(self, not res and ferr or nil, unavailable, t0, mark)
    if unavailable then
        red:close()
        self:failed()
        return nil, ferr
    end
    self:release(red)
    return res, ferr
end

return _M
