-- Redis Sentinel: the address of the current master of a named group, asked of the sentinels
-- with SENTINEL get-master-addr-by-name and kept in a shared dict, so one answer serves every
-- worker of the node. It is asked again
--   * every `refresh_every` seconds (1; one worker per interval): after `SENTINEL FAILOVER` the old
--     master stays writable until the sentinels reconfigure it, seconds later;
--   * at once after a connection failure or a READONLY reply (single-flight per node);
--   * synchronously, within the caller's timeout, when no address is known yet.
-- Sentinels are queried without AUTH (the URL's password is the data nodes' password).
-- (Debian's lua-nginx-redis-connector asks the sentinels on every connect, does not cache the
-- master, and passes `self` as the read timeout after connecting, so it is not used.)
local timer_at = ngx.timer.at
local log = ngx.log
local WARN = ngx.WARN
local null = ngx.null
local concat = table.concat

local _M = {}
local mt = { __index = _M }

--- opts: lib (resty.redis), sentinels ({{host, port}, ...}), master_name, dict (shared dict),
-- refresh (seconds, default 1).
function _M.new(opts)
    if type(opts.sentinels) ~= "table" or #opts.sentinels == 0 then
        return nil, "no sentinel address"
    end
    if type(opts.master_name) ~= "string" or opts.master_name == "" then
        return nil, "no sentinel master name"
    end
    local key = "redis:sentinel:" .. opts.master_name
    return setmetatable({
        lib = opts.lib,
        sentinels = opts.sentinels,
        name = opts.master_name,
        dict = opts.dict,
        refresh_every = opts.refresh or 1,
        key = key,
        lock = key .. ":lock",
        tick_key = key .. ":tick",
        first = 1,       -- the sentinel that answered last is asked first
    }, mt)
end

-- Ask one sentinel; returns "host:port" or nil, err.
local function ask(self, s, timeout_ms)
    local red = self.lib:new()
    red:set_timeout(timeout_ms)
    local ok, err = red:connect(s.host, s.port,
        { pool = "tollgate:sentinel:" .. s.host .. ":" .. s.port })
    if not ok then
        return nil, s.host .. ":" .. s.port .. ": " .. tostring(err)
    end
    local res, serr = red:sentinel("get-master-addr-by-name", self.name)
    if type(res) == "table" and res[1] and res[2] then
        red:set_keepalive(60000, 4)
        return res[1] .. ":" .. res[2]
    end
    if res == nil then
        red:close()
    else
        red:set_keepalive(60000, 4)
    end
    if res == null then
        serr = "unknown master " .. self.name
    end
    return nil, s.host .. ":" .. s.port .. ": " .. tostring(serr)
end

--- Ask the sentinels (in turn, the last good one first) for the master; store and return it.
function _M.resolve(self, timeout_ms)
    local n = #self.sentinels
    local errs = {}
    for i = 0, n - 1 do
        local idx = (self.first - 1 + i) % n + 1
        local addr, err = ask(self, self.sentinels[idx], timeout_ms)
        if addr then
            self.first = idx
            local old = self.dict:get(self.key)
            if addr ~= old then
                self.dict:set(self.key, addr)
                log(WARN, "tollgate: sentinel master of ", self.name, " is ", addr,
                    old and (" (was " .. old .. ")") or "")
            end
            return addr
        end
        errs[#errs + 1] = err
    end
    return nil, "no sentinel answered for " .. self.name .. ": " .. concat(errs, "; ")
end

--- The current master "host:port" (resolving within timeout_ms if none is known yet).
function _M.master(self, timeout_ms)
    local addr = self.dict:get(self.key)
    if addr then
        return addr
    end
    return self:resolve(timeout_ms)
end

local function resolve_timer(premature, self, timeout_ms)
    if premature then
        return
    end
    local _, err = self:resolve(timeout_ms)
    if err then
        log(WARN, "tollgate: ", err)
    end
end

--- The master failed us (refused, timeout, READONLY...): ask the sentinels again, in the
-- background, at most once per 200 ms per node.
function _M.invalidate(self, timeout_ms)
    if self.dict:add(self.lock, true, 0.2) then
        local ok, err = timer_at(0, resolve_timer, self, timeout_ms or 1000)
        if not ok then
            log(WARN, "tollgate: cannot start sentinel resolve: ", err)
        end
    end
end

--- Periodic upkeep (every `refresh_every` seconds in every worker, see redis/client.lua start): one
-- worker of the node per interval asks the sentinels again.
function _M.tick(self, timeout_ms)
    if self.dict:add(self.tick_key, true, self.refresh_every * 0.9) then
        resolve_timer(false, self, timeout_ms)
    end
end

return _M
