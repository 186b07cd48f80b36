-- The budget of forged traffic: requests the backend refused as unauthenticated (401/403) are
-- counted per client address and per (access key id, client address) in the tollgate_authfail
-- dict, each in a window that starts with its first failure (TOLLGATE_AUTH_FAIL_WINDOW).
-- Beyond TOLLGATE_AUTH_FAIL_BUDGET failures of an address, or TOLLGATE_AUTH_FAIL_KEY_BUDGET of a
-- key from an address, the gateway refuses that traffic itself (no backend round trip, no
-- token, no slot) until the window passes. A spray from many addresses evicts only other
-- addresses' counts (the dict is an LRU by design).
local ipmatch = require("tollgate.request.ipmatch")

local var = ngx.var

local dict = ngx.shared.tollgate_authfail     -- nil in an nginx without the http include's dict

local _M = {}

local WINDOW, BUDGET, KEY_BUDGET = 60, 0, 0
local ANY = "*"     -- set (for a window) by every failure: most requests need no more than its read
local TRUSTED

--- Settings: auth_fail_window, auth_fail_budget, auth_fail_key_budget, trusted_proxies.
function _M.configure(conf)
    WINDOW, BUDGET, KEY_BUDGET = conf.auth_fail_window, conf.auth_fail_budget,
        conf.auth_fail_key_budget
    TRUSTED = conf.trusted_proxies
end

--- The client address the budget counts: $remote_addr, or the last untrusted hop of
-- X-Forwarded-For behind TOLLGATE_TRUSTED_PROXIES.
function _M.client(headers)
    local remote = var.remote_addr
    if TRUSTED == nil or #TRUSTED == 0 then
        return remote
    end
    return (ipmatch.client(remote, headers["x-forwarded-for"], TRUSTED))
end

local function key_of(akid, ip)
    return "k " .. akid .. " " .. ip
end

-- seconds until counter key's window passes (at least 1)
local function wait(key)
    local ttl = dict:ttl(key)
    if not ttl or ttl <= 0 then
        return 1
    end
    return ttl
end

--- Is the budget of this request's address (or key and address) spent? Returns nil, or the
-- seconds until its window passes and the failures counted. akid: the request's access key id
-- (false/nil without one). Costs one dict read while the node saw no failure in a window, two
-- and the client address for an address without failures.
function _M.spent(headers, akid)
    if not dict or BUDGET <= 0 and KEY_BUDGET <= 0 or not dict:get(ANY) then
        return nil      -- no failure on this node in the last window: not even the address read
    end
    local ip = _M.client(headers)
    local n = dict:get(ip)
    if not n then
        return nil      -- no failure of this address in its window (a key's count implies one)
    end
    if BUDGET > 0 and n >= BUDGET then
        return wait(ip), n
    end
    if akid and KEY_BUDGET > 0 then
        local k = key_of(akid, ip)
        local kn = dict:get(k)
        if kn and kn >= KEY_BUDGET then
            return wait(k), kn
        end
    end
    return nil
end

--- Count a failure of the request's address and key (log phase). Returns the address's count
-- in its window and the address.
function _M.failed(headers, akid)
    local ip = _M.client(headers)
    if not dict then
        return nil, ip
    end
    dict:set(ANY, true, WINDOW)
    local n = dict:incr(ip, 1, 0, WINDOW)
    if akid then
        dict:incr(key_of(akid, ip), 1, 0, WINDOW)
    end
    return n, ip
end

return _M
