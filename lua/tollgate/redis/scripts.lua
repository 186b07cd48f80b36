-- The Redis scripts of redis-scripts/, read once from disk (the same files the control plane
-- embeds), run by SHA with recovery from NOSCRIPT (SCRIPT FLUSH, restart, failover).
local sha1_bin = ngx.sha1_bin
local byte = string.byte
local format = string.format
local concat = table.concat
local find = string.find

local _M = { names = { "l2_grant", "l3_report", "app_config", "cluster_config",
                         "rule_acquire", "rule_stats" } }

local function hex(s)
    local out = {}
    for i = 1, #s do
        out[i] = format("%02x", byte(s, i))
    end
    return concat(out)
end

local function read_file(path)
    local f, err = io.open(path, "rb")
    if not f then
        return nil, err
    end
    local s = f:read("*a")
    f:close()
    return s
end

--- Directory holding redis-scripts/: TOLLGATE_SCRIPTS_DIR or next to the lua/ dir this file is in.
function _M.default_dir()
    local src = debug.getinfo(1, "S").source
    local dir = src:match("^@(.*)/[^/]+$") or "."
    return dir .. "/../../../redis-scripts"
end

--- Load every script: prelude _common.lua + "\n" + body (as the control plane does).
function _M.load(dir)
    dir = dir or _M.default_dir()
    local common, err = read_file(dir .. "/_common.lua")
    if not common then
        return nil, "cannot read redis scripts from " .. dir .. ": " .. tostring(err)
    end
    local set = {}
    for _, name in ipairs(_M.names) do
        local body, berr = read_file(dir .. "/" .. name .. ".lua")
        if not body then
            return nil, "cannot read redis script " .. name .. ": " .. tostring(berr)
        end
        local src = common .. "\n" .. body
        set[name] = { src = src, sha = hex(sha1_bin(src)) }
    end
    return set
end

--- Run script `s` ({src, sha}) on connection red: EVALSHA, and EVAL on NOSCRIPT.
-- nkeys and the arguments follow EVALSHA's order.
function _M.run(red, s, nkeys, ...)
    local res, err = red:evalsha(s.sha, nkeys, ...)
    if not res and err and find(err, "NOSCRIPT", 1, true) then
        res, err = red:eval(s.src, nkeys, ...)
    end
    return res, err
end

return _M
