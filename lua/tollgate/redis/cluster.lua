-- Redis Cluster for the gateway: a per-worker slot map from CLUSTER SLOTS, loaded at start,
-- refreshed every few seconds and soon after a MOVED or a failed node, and handles (see
-- redis/cluster_handle.lua) that route the commands of one `with` call by that map.
local crc16 = require("tollgate.redis.crc16")
local handle = require("tollgate.redis.cluster_handle")

local slot_of = crc16.slot
local now = ngx.now
local update_time = ngx.update_time
local timer_at = ngx.timer.at
local log = ngx.log
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local match = string.match
local concat = table.concat
local random = math.random

local _M = {}
local mt = { __index = _M }

local MIN_REFRESH_GAP = 0.1     -- seconds between two refreshes of a worker's map

--- client: the tollgate.redis.client client (connect_to, target_of, release, is_unavailable);
-- seeds: {{host, port}, ...}; refresh: seconds between periodic slot map refreshes.
function _M.new(client, seeds, refresh)
    local addrs = {}
    for i = 1, #seeds do
        addrs[i] = seeds[i].host .. ":" .. seeds[i].port
    end
    return setmetatable({
        client = client,
        seeds = addrs,
        refresh_every = refresh or 5,
        slots = nil,        -- slot + 1 -> "host:port" of its master
        masters = {},       -- distinct master addresses
        sig = nil,          -- CLUSTER SLOTS ranges of the current map
        refreshing = false,
        last_refresh = 0,
    }, mt)
end

-- Build the map from a CLUSTER SLOTS reply; returns true when it changed.
local function apply(self, reply, asked)
    local parts, addrs, masters, seen = {}, {}, {}, {}
    for i = 1, #reply do
        local r = reply[i]
        local node = r[3]
        local host = node[1]
        if host == "" or host == "?" then
            host = match(asked, "^(.*):%d+$")
        end
        local addr = host .. ":" .. node[2]
        addrs[i] = addr
        parts[i] = r[1] .. "-" .. r[2] .. "=" .. addr
        if not seen[addr] then
            seen[addr] = true
            masters[#masters + 1] = addr
        end
    end
    local sig = concat(parts, ",")
    if sig == self.sig then
        return false
    end
    local slots = {}
    for i = 1, #reply do
        local r = reply[i]
        local addr = addrs[i]
        for s = r[1] + 1, r[2] + 1 do
            slots[s] = addr
        end
    end
    self.slots, self.masters, self.sig = slots, masters, sig
    return true
end

--- Load the slot map from the first node that answers (known masters, then the seeds).
function _M.refresh(self, timeout_ms)
    update_time()
    self.last_refresh = now()
    local client = self.client
    local errs = {}
    local candidates = {}
    for _, list in ipairs({ self.masters, self.seeds }) do
        for i = 1, #list do
            candidates[#candidates + 1] = list[i]
        end
    end
    for i = 1, #candidates do
        local addr = candidates[i]
        local red, err = client:connect_to(client:target_of(addr), timeout_ms)
        if red then
            local reply
            reply, err = red:cluster("slots")
            if type(reply) == "table" and #reply > 0 then
                client:release(red)
                if apply(self, reply, addr) then
                    log(NOTICE, "tollgate: redis cluster slot map from ", addr, ": ", self.sig)
                end
                return true
            end
            if reply == nil then
                red:close()
            else
                client:release(red)
                err = err or "empty CLUSTER SLOTS"
            end
        end
        errs[#errs + 1] = addr .. ": " .. tostring(err)
    end
    return nil, "redis_connection_failed: no cluster node answered CLUSTER SLOTS ("
        .. concat(errs, "; ") .. ")"
end

local function refresh_timer(premature, self)
    if not premature then
        local _, err = self:refresh(1000)
        if err then
            log(WARN, "tollgate: ", err)
        end
    end
    self.refreshing = false
end

--- Refresh the map in the background soon (single-flight, at most every 100 ms per worker).
function _M.stale(self)
    if self.refreshing or now() - self.last_refresh < MIN_REFRESH_GAP then
        return
    end
    self.refreshing = true
    local ok, err = timer_at(0, refresh_timer, self)
    if not ok then
        self.refreshing = false
        log(WARN, "tollgate: cannot start slot map refresh: ", err)
    end
end

--- Periodic upkeep (every `refresh_every` seconds in every worker, see redis/client.lua start):
-- reload this worker's map.
function _M.tick(self)
    if not self.refreshing then
        self.refreshing = true
        refresh_timer(false, self)
    end
end

--- Master address for key (any master when key is nil), loading the map if there is none.
function _M.addr(self, key, timeout_ms)
    if not self.slots then
        local ok, err = self:refresh(timeout_ms)
        if not ok then
            return nil, err
        end
    end
    if key then
        return self.slots[slot_of(key) + 1] or self.masters[1]
    end
    return self.masters[random(#self.masters)]
end

--- A handle for one `with` call (commands routed by slot, each round trip bounded by
-- timeout_ms).
function _M.handle(self, timeout_ms)
    return handle.new(self, timeout_ms)
end

return _M
