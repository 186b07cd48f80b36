-- Test endpoints of the integration suites: call tollgate's modules inside nginx.
local cjson = require("cjson.safe")
local config = require("tollgate.config")
local shm = require("tollgate.shm")
local l3 = require("tollgate.l3_bucket")
local cost = require("tollgate.cost")
local handler = require("tollgate.handler")

local dict = shm.dict
local _M = {}

local function reply(t)
    ngx.header["Content-Type"] = "application/json"
    ngx.print(cjson.encode(t))
end

local function app_arg()
    local id = ngx.var.arg_app
    local a = id and config.app(id)
    if not a then
        ngx.status = 404
        reply({ error = "unknown app " .. tostring(id) })
        return ngx.exit(404)
    end
    return a
end

local actions = {}

function actions.state()
    local id = ngx.var.arg_app
    local k = shm.keys(id)
    reply({
        tokens = dict:get(k.tokens) or 0,
        pending_cost = dict:get(k.pending_cost) or 0,
        pending_count = dict:get(k.pending_count) or 0,
        debt = dict:get(k.debt) or 0,
        target = dict:get(k.target) or 0,
        fail_open = dict:get(k.fail_open) or 0,
        rollback_count = dict:get(k.rollback_count) or 0,
        neg = dict:get(k.neg) or 0,
        inflight = dict:get(k.inflight) or "",
    })
end

-- set the lease of an app and clear its local accounting
function actions.set()
    local a = app_arg()
    local k = shm.keys(a.id)
    dict:set(k.tokens, tonumber(ngx.var.arg_tokens) or 0)
    dict:set(k.pending_cost, 0)
    dict:set(k.pending_count, 0)
    dict:set(k.debt, 0)
    dict:delete(k.neg)
    reply({ ok = true })
end

function actions.acquire()
    local a = app_arg()
    local ok, x, y = l3.acquire(a, tonumber(ngx.var.arg_cost))
    if ok then
        reply({ ok = true, remaining = x, source = y })
    else
        reply({ ok = false, reason = x })
    end
end

function actions.charge()
    local a = app_arg()
    l3.charge(a, tonumber(ngx.var.arg_amount))
    reply({ ok = true })
end

function actions.rollback()
    local a = app_arg()
    l3.rollback(a, tonumber(ngx.var.arg_cost))
    reply({ ok = true })
end

function actions.cost()
    local args = ngx.req.get_uri_args()
    local op, err = cost.classify(args.method, args.path, args.query, args.copy == "1")
    if not op then
        return reply({ error = err })
    end
    local calc = handler.calculator()
    reply({ op = op, cost = calc:calculate(op, tonumber(args.bytes) or 0,
                                           tonumber(args.c_bw) or 1) })
end

function actions.settings()
    reply(handler.settings())
end

function _M.handle()
    local name = ngx.var.uri:match("^/_t/([%w_]+)$")
    local fn = name and actions[name]
    if not fn then
        ngx.status = 404
        return reply({ error = "no test action " .. tostring(name) })
    end
    return fn()
end

-- The storage backend: ?size=N answers N bytes, ?ms=N waits first, ?code=N answers that status.
function _M.backend()
    ngx.req.discard_body()
    local args = ngx.req.get_uri_args()
    local ms = tonumber(args.ms)
    if ms then
        ngx.sleep(ms / 1000)
    end
    local code = tonumber(args.code)
    if code then
        return ngx.exit(code)
    end
    local n = tonumber(args.size)
    if not n then
        return ngx.print("ok")
    end
    local chunk = string.rep("x", 65536)
    while n > 0 do
        local m = n < 65536 and n or 65536
        ngx.print(m == 65536 and chunk or chunk:sub(1, m))
        n = n - m
    end
end

return _M
