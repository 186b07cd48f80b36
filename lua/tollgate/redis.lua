-- Redis connections for the gateway: one keepalive pool per worker, a hard timeout on every
-- path a request waits on, and failure classification. Works with OpenResty's resty.redis and
-- Debian's nginx.redis (lua-resty-redis 0.27, which has set_timeout but no set_timeouts).
local ok_resty, redis_lib = pcall(require, "resty.redis")
if not ok_resty then
    redis_lib = require("nginx.redis")
end

local now = ngx.now
local update_time = ngx.update_time
local find = string.find
local sub = string.sub
local tonumber = tonumber

local _M = { lib = redis_lib }

-- Replies meaning "this server cannot serve us now": the connection is closed, never pooled.
local UNAVAILABLE = { "READONLY", "NOREPLICAS", "OOM", "MISCONF", "LOADING", "MASTERDOWN" }

--- Parse redis://[:password@]host:port[/db] (also host:port).
function _M.parse_url(url)
    if type(url) ~= "string" or url == "" then
        return nil, "empty redis url"
    end
    local rest = url:match("^redis://(.*)$") or url
    local password
    local at = rest:find("@", 1, true)
    if at then
        local cred = rest:sub(1, at - 1)
        rest = rest:sub(at + 1)
        password = cred:match("^[^:]*:(.*)$") or cred
        if password == "" then
            password = nil
        end
    end
    local host, port, db = rest:match("^([^:/]+):(%d+)/?(%d*)$")
    if not host then
        return nil, "invalid redis url (want redis://[:password@]host:port[/db]): " .. url
    end
    return { host = host, port = tonumber(port), db = tonumber(db) or 0, password = password }
end

--- A client bound to one server. opts: url, pool_size (50), keepalive_ms (60000).
function _M.new(opts)
    local target, err = _M.parse_url(opts.url)
    if not target then
        return nil, err
    end
    local self = {
        target = target,
        pool_size = opts.pool_size or 50,
        keepalive_ms = opts.keepalive_ms or 60000,
        pool = "tollgate:" .. target.host .. ":" .. target.port .. ":" .. target.db .. ":"
            .. (target.password and ngx.md5(target.password) or ""),
        on_result = opts.on_result,  -- function(err|nil, unavailable, seconds)
    }
    return setmetatable(self, { __index = _M })
end

--- Connect with a timeout (ms) applied to connect, send and read.
function _M.connect(self, timeout_ms)
    local red = redis_lib:new()
    red:set_timeout(timeout_ms)
    local t = self.target
    local ok, err = red:connect(t.host, t.port, { pool = self.pool, pool_size = self.pool_size })
    if not ok then
        return nil, "redis_connection_failed: " .. tostring(err)
    end
    if red:get_reused_times() == 0 then
        if t.password then
            local res, aerr = red:auth(t.password)
            if not res then
                red:close()
                return nil, "redis_auth_failed: " .. tostring(aerr)
            end
        end
        if t.db ~= 0 then
            local res, serr = red:select(t.db)
            if not res then
                red:close()
                return nil, "redis_select_failed: " .. tostring(serr)
            end
        end
    end
    return red
end

function _M.release(self, red)
    red:set_keepalive(self.keepalive_ms, self.pool_size)
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

--- Run fn(red) on a pooled connection with timeout_ms; returns fn's results or nil, err.
-- The connection goes back to the pool only when fn succeeded or failed with a logic error.
function _M.with(self, timeout_ms, fn, ...)
    update_time()
    local t0 = now()
    local red, err = self:connect(timeout_ms)
    if not red then
        if self.on_result then
            update_time()
            self.on_result(err, true, now() - t0)
        end
        return nil, err
    end
    local res, ferr = fn(red, ...)
    update_time()
    local unavailable = not res and _M.is_unavailable(ferr)
    if self.on_result then
        self.on_result(not res and ferr or nil, unavailable, now() - t0)
    end
    if unavailable then
        red:close()
        return nil, ferr
    end
    self:release(red)
    return res, ferr
end

return _M
