-- Worker chunks of the node rules (tollgate.rules.local, tollgate.rules.token): how many units
-- a worker may hold of a counter, and each worker's local state of the counters it holds
-- units of (see the header of rules/local.lua for why chunks exist and what they guarantee).
local floor = math.floor

local _M = {}

local CHUNK_MAX = 256          -- units a worker holds of one window counter at most
local TOKEN_CHUNK_MAX = 64     -- tokens a worker reserves for one clock reading at most

local workers = 1
--- Number of workers sharing the dict (chunk sizes leave room for each to hold one).
function _M.set_workers(n)
    workers = n > 0 and n or 1
end

local L, L_n = {}, 0           -- per worker: counter key -> its local state
--- Replace this worker's local state (tests simulate several workers with it).
function _M.set_state(t)
    local old = L
    L, L_n = t, 0
    return old
end

-- A new local state entry (the table is dropped when per-user/IP keys pile up: what it held
-- is then never spent, which only lowers what the node admits).
function _M.new_state(key, st)
    if L_n >= 20000 then
        L, L_n = {}, 0
    end
    L[key] = st
    L_n = L_n + 1
    return st
end

-- Units a worker may hold of rule r's counters (0: none, every request checks the dict).
function _M.chunk(r, token)
    local c = r.chunk
    if c == nil then
        if token then
            local rate = r.limit / r.window            -- units per second
            c = floor((r.burst or r.limit) / 1024)
            if c > floor(rate / 1000) then              -- what one millisecond refills
                c = floor(rate / 1000)
            end
            if c > TOKEN_CHUNK_MAX then
                c = TOKEN_CHUNK_MAX
            end
        else
            c = floor(r.limit / 1024)
            if c > CHUNK_MAX then
                c = CHUNK_MAX
            end
        end
        r.chunk = c
    end
    return c
end


--- This worker's local state of counter `key` (nil: none yet).
function _M.get(key)
    return L[key]
end

--- Workers sharing the dict.
function _M.workers()
    return workers
end

return _M
