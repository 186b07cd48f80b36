-- Config watch (worker 0): apply a new config version at once on a pub/sub notice, and poll
-- the version so that a missed notice converges within one poll interval (docs/design.md §8).
-- The poll's Redis round also carries the node's report (tollgate.heartbeat) when it is due,
-- and the emergency state's refresh.
local cfgcache = require("tollgate.config.cache")
local load = require("tollgate.config.load")
local emergency = require("tollgate.lease.emergency")
local heartbeat = require("tollgate.heartbeat")
local connlimit = require("tollgate.conn.limiter")
local keys = require("tollgate.keys")

local log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local now = ngx.now

local _M = {}

local conf, redis_client

function _M.init(settings, client)
    conf, redis_client = settings, client
    heartbeat.init(settings)
end

local running, pending = false, false

-- Bring the node to the store's config (load.update: the change log, or a full load when it
-- cannot be used). Single-flight and coalescing: a notice or poll while one runs only asks for
-- one more round after it.
local function reload(reason)
    if running then
        pending = true
        return nil, "coalesced"
    end
    running = true
    local v, err
    repeat
        pending = false
        local r
        r, err = redis_client:with(conf.bg_timeout_ms, function(red)
            local ver, full, changed = load.update(red)
            if not ver then
                return nil, full
            end
            return { ver, full, changed }
        end)
        if not r then
            v = nil
            if not cfgcache.store_lost() then    -- a lost store was logged once by config
                log(WARN, "tollgate: config reload (", reason, ") failed: ", err)
            end
        else
            v = r[1]
            if r[2] then
                log(ngx.INFO, "tollgate: config version ", v, " loaded (", reason, ")")
                -- then every loaded app's connection limits, in a timer of their own (batches
                -- of pipelined HMGETs) while changes keep being applied; a change's limits are
                -- read with it (tollgate.config.load)
                local list = r[3]
                local ok, terr = ngx.timer.at(0, function(premature)
                    if not premature then
                        connlimit.refresh(reason, list, true)
                    end
                end)
                if not ok then
                    log(ERR, "tollgate: connection limits not refreshed: ", terr)
                end
            end
        end
    until not pending
    running = false
    return v, err
end
_M.reload = reload

local function poll(premature)
    if premature then
        return
    end
    local v, err = redis_client:with(conf.bg_timeout_ms, function(red)
        local ver, gerr = red:get(keys.config_version())
        if gerr then
            return nil, gerr
        end
        local epoch, eperr = red:get(keys.config_epoch())
        if eperr then
            return nil, eperr
        end
        if epoch ~= ngx.null and epoch ~= cfgcache.epoch() then
            ver = "epoch:" .. epoch    -- another epoch: reload, which decides
        end
        local ok, herr = heartbeat.report_if_due(red, now())
        if not ok then
            return nil, herr    -- e.g. READONLY: the connection must not be pooled
        end
        local eerr
        ok, eerr = emergency.refresh(red)
        if not ok then
            return nil, eerr
        end
        return ver
    end)
    if err then
        return
    end
    local current = cfgcache.version()
    if current == nil or tonumber(v) ~= current or cfgcache.store_lost() then
        reload("poll")
    end
end

-- An idle subscription is normal: Redis sends nothing until a change. A read that times out on
-- it would be logged by nginx itself at error level ("lua tcp socket read timed out", whatever
-- the caller does with it), every read timeout. So a light thread writes a PING on the same
-- (full-duplex) socket every PING_EVERY s; Redis answers "pong" on the subscription, the reader
-- wakes at least that often (to see the worker exiting), and a read only times out (READ_TIMEOUT)
-- when Redis stopped answering: a real error, logged as one.
local PING_EVERY = 2
local READ_TIMEOUT = 3 * PING_EVERY * 1000
local PING = "*1\r\n$4\r\nPING\r\n"

local function pinger(sock)
    while not ngx.worker.exiting() do
        ngx.sleep(PING_EVERY)
        local ok, err = sock:send(PING)
        if not ok then
            return nil, err
        end
    end
end

-- Long-lived subscriber; reconnects after errors.
local function subscriber(premature)
    if premature then
        return
    end
    while not ngx.worker.exiting() do
        local red, err = redis_client:connect(conf.bg_timeout_ms)
        if red then
            red:set_timeout(READ_TIMEOUT)
            local ok, serr = red:subscribe(keys.config_channel(), keys.emergency_channel())
            if ok then
                local th = ngx.thread.spawn(pinger, rawget(red, "_sock"))
                reload("subscribe")
                while not ngx.worker.exiting() do
                    local msg, rerr = red:read_reply()
                    if msg then
                        if msg[1] == "message" and msg[2] == keys.emergency_channel() then
                            emergency.notice(msg[3])
                        elseif msg[1] == "message" then
                            reload("notice")
                        end    -- else "pong"
                    else
                        err = rerr
                        break
                    end
                end
                ngx.thread.kill(th)
            else
                err = serr
            end
            red:close()
        end
        if not ngx.worker.exiting() then
            log(WARN, "tollgate: config subscriber reconnecting: ", err)
            ngx.sleep(1)
        end
    end
end

function _M.start()
    local ok, err = ngx.timer.at(0, poll)
    if ok then
        ok, err = ngx.timer.every(conf.config_poll, poll)
    end
    if ok then
        ok, err = ngx.timer.at(0, subscriber)
    end
    if not ok then
        log(ERR, "tollgate: cannot start config watch: ", err)
    end
end

return _M
