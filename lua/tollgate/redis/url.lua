-- Redis URLs of the gateway (TOLLGATE_REDIS_URL): one server, Sentinel's master or a Redis
-- Cluster. Pure Lua (no ngx): tollgate.settings checks the URL at start with it, and
-- tollgate.redis.client connects by it.
local match = string.match
local find = string.find
local sub = string.sub
local gmatch = string.gmatch
local tonumber = tonumber
local type = type

local _M = {}

local function parse_hosts(list)
    local hosts = {}
    for item in gmatch(list, "[^,]+") do
        local host, port = match(item, "^([^:/]+):(%d+)$")
        if not host then
            return nil
        end
        hosts[#hosts + 1] = { host = host, port = tonumber(port) }
    end
    return #hosts > 0 and hosts or nil
end

local FORMS = {
    single = "redis://[:password@]host:port[/db]",
    sentinel = "redis-sentinel://[:password@]host:port[,host:port...]/<master-name>[/db]",
    cluster = "redis-cluster://[:password@]host:port[,host:port...]",
}

--- Parse a Redis URL (forms above; a bare host:port is one server; "user:password@" authenticates
-- as an ACL user). Returns {kind = "single"|"sentinel"|"cluster", hosts = {{host, port}...}, db,
-- user, password, master_name}.
function _M.parse(url)
    if type(url) ~= "string" or url == "" then
        return nil, "empty redis url"
    end
    local kind, rest = "single", match(url, "^redis://(.*)$")
    if not rest then
        rest = match(url, "^redis%-sentinel://(.*)$")
        kind = rest and "sentinel" or "cluster"
        rest = rest or match(url, "^redis%-cluster://(.*)$")
    end
    if not rest then
        if find(url, "://", 1, true) then
            return nil, "unsupported redis url scheme (want " .. FORMS.single .. ", "
                .. FORMS.sentinel .. " or " .. FORMS.cluster .. ")"
        end
        kind, rest = "single", url
    end
    local user, password
    local at = find(rest, "@", 1, true)
    if at then
        local cred = sub(rest, 1, at - 1)
        rest = sub(rest, at + 1)
        user, password = match(cred, "^([^:]*):(.*)$")
        if not user then
            password = cred
        end
        if user == "" then
            user = nil
        end
        if password == "" then
            password = nil
        end
    end
    local u = { kind = kind, user = user, password = password, db = 0 }
    local list, path = match(rest, "^([^/]+)(.*)$")
    u.hosts = list and parse_hosts(list)
    local db
    if kind == "sentinel" then
        u.master_name, db = match(path or "", "^/([%w_%.%-]+)/?(%d*)$")
    elseif kind == "cluster" then
        db = match(path or "", "^/?(0?)$")
    else
        db = match(path or "", "^/?(%d*)$")
    end
    if not u.hosts or db == nil or (kind == "single" and #u.hosts ~= 1)
            or (kind == "sentinel" and not u.master_name) then
        return nil, "invalid redis url (want " .. FORMS[kind] .. ")"
    end
    u.db = tonumber(db) or 0
    return u
end

return _M
