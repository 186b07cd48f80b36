-- The state a request carries from access() to log(): its tg_* fields and the table of its
-- headers, in one table from a worker-local pool, found again by the request's address.
--
-- Why not ngx.ctx: every request would cost a fresh ctx table, a registry reference and a pool
-- cleanup (about 1.3k instructions per request under callgrind, with the garbage the collector
-- sweeps). The request's address is unique while the request lives, and log() takes the state
-- out again; the start time stored beside it tells a state left behind by an earlier request at
-- the same address (one whose log phase did not run tollgate's log(), e.g. a subrequest) from
-- the current one's.
--
-- Why FIELDS: a cleared table would make each field a new key again on the next request (a
-- hash insertion each); resetting the known fields to false keeps the keys. Every field a
-- module keeps on the state is listed here (t/lua/reqstate_spec.lua checks the sources).
local ffi = require("ffi")
local base = require("resty.core.base")
require("resty.core.request")   -- declares ngx_http_lua_ffi_req_start_time

local new_tab = require("table.new")
local clear_tab = require("table.clear")
local C = ffi.C
local cast = ffi.cast
local get_request = base.get_request
local tonumber = tonumber
local concat = table.concat

local uintptr_t = ffi.typeof("uintptr_t")

local _M = {}

_M.FIELDS = {
    -- handler
    "tg_label", "tg_method", "tg_app", "tg_cost", "tg_total", "tg_covered", "tg_estimate",
    "tg_reserve", "tg_chunked", "tg_op", "tg_source", "tg_akid", "tg_deferred", "tg_head",
    -- identity: the request carries S3 credentials (refusals in S3's dialect), or named its app
    -- by the app header or a variable (refusals in JSON)
    "tg_s3", "tg_named",
    -- pace (the body filter of downloads)
    "tg_pace", "tg_paid", "tg_flow", "tg_pk", "tg_paced", "tg_p0", "tg_pt", "tg_pallow",
    "tg_ptotal", "tg_bcount", "tg_pl", "tg_pr", "tg_ps", "tg_pst", "tg_pb",
    "tg_px", "tg_psent", "tg_phdr",
    -- connlimit
    "tg_conn", "tg_conn_rid", "tg_conn_e", "tg_conn_ip",
    -- breaker
    "tg_brk", "tg_brk_k", "tg_brk_ep", "tg_brk_probe", "tg_brk_refused",
}

-- reset(t): t.<field> = false for every field, compiled once into straight-line code (a loop
-- over the names would be a loop in the log phase's trace)
local function compile_reset(fields)
    local src = { "local t = ..." }
    for i = 1, #fields do
        src[#src + 1] = "t." .. fields[i] .. " = false"
    end
    return assert(loadstring(concat(src, "\n"), "=reqstate.reset"))
end
local reset = compile_reset(_M.FIELDS)

local pool, npool = {}, 0
local POOL_MAX = 4096
local live = {}         -- request address -> state

local function address(r)
    return tonumber(cast(uintptr_t, r))
end

--- The state of the current request, fresh: its fields false, its header table `h` empty.
function _M.open()
    local st
    if npool > 0 then
        st = pool[npool]
        pool[npool] = nil
        npool = npool - 1
    else
        st = new_tab(0, #_M.FIELDS + 2)
        reset(st)
        st.h = new_tab(0, 8)
    end
    local r = get_request()
    st.started = tonumber(C.ngx_http_lua_ffi_req_start_time(r))
    live[address(r)] = st
    return st
end

--- The current request's state, taken out of the table of live states, or nil when access()
-- did not open one for this request.
function _M.take()
    local r = get_request()
    local k = address(r)
    local st = live[k]
    if st == nil then
        return nil
    end
    live[k] = nil
    if st.started ~= tonumber(C.ngx_http_lua_ffi_req_start_time(r)) then
        _M.release(st)      -- left behind by an earlier request at this address
        return nil
    end
    return st
end

--- The current request's state without taking it out (refusals read its fields), or nil.
function _M.current()
    local r = get_request()
    local st = live[address(r)]
    if st == nil or st.started ~= tonumber(C.ngx_http_lua_ffi_req_start_time(r)) then
        return nil
    end
    return st
end

--- Give a state back to the pool (its fields reset, its header table emptied).
function _M.release(st)
    reset(st)
    clear_tab(st.h)
    if npool < POOL_MAX then
        npool = npool + 1
        pool[npool] = st
    end
end

_M.compile_reset = compile_reset

return _M
