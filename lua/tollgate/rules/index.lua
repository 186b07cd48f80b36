-- The rule index (docs/rules-contract.md §2): a worker's compiled rule set, indexed by the
-- dimensions a request is matched on, so that a request walks only the rules that can match it.
--
-- A request's signature is its app, method, bucket and the value of each header some rule
-- matches on, each reduced to a value a rule names or to false ("any other"): there are
-- finitely many signatures whatever the requests send. The candidates of a signature — the
-- rules that accept every part of it, in priority order — are listed the first time a request
-- has it and kept (at most MAX lists; beyond that the memo starts over). A candidate is still
-- checked on every match field (rules.check): the index only leaves out rules that cannot
-- match, never decides that one does.
--
-- Dimensions of a rule: match.app_ids, match.methods, its bucket (match.bucket, else the first
-- path segment of a match.path glob when that segment is literal) and every pair of
-- match.headers. A rule without any of them is a candidate of every signature. A request that
-- repeats a header some rule matches on is a signature of its own for that header ("any
-- value"): every rule of the other dimensions is then a candidate and the check decides.
-- Pure Lua: the caller gives the request's bucket (a function, called only when some rule of
-- the app and method has a bucket) and its headers (a table of lower-case names, a repeated
-- header a list of its values).
local type = type
local pairs = pairs
local next = next
local byte = string.byte
local find = string.find
local sub = string.sub
local sort = table.sort

local _M = {}

_M.MAX = 20000                  -- lists (and nodes) kept before the memo starts over
local SLASH = 47
local ANY = {}                  -- the key of a repeated header's level

--- The bucket a path glob selects: its first segment when that is literal and complete
-- ("/photos/**", "/photos/*/raw", "/photos"), else nil ("/photo*", "//x", "/**").
function _M.glob_bucket(g)
    if byte(g, 1) ~= SLASH then
        return nil
    end
    local star = find(g, "*", 2, true)
    local slash = find(g, "/", 2, true)
    local stop
    if slash and (not star or slash < star) then
        stop = slash - 1
    elseif not star and not slash then
        stop = #g
    else
        return nil
    end
    if stop < 2 then
        return nil
    end
    return sub(g, 2, stop)
end

--- The order rules are checked in: priority (lower first), then id.
function _M.before(a, b)
    if a.priority ~= b.priority then
        return a.priority < b.priority
    end
    return a.id < b.id
end

-- every name a rule's headers use, with the value it wants: name -> value
local function header_map(r)
    local hs = r.headers
    if not hs then
        return nil
    end
    local m = {}
    for i = 1, #hs do
        m[hs[i][1]] = hs[i][2]
    end
    return m
end

--- Index the rules of list (sorted, checked rules of tollgate.rules.parse). indexed(name)
-- says whether the request's headers table will hold header `name` (when not, the rule is a
-- candidate whatever the header holds, and its check must read every header first). Sets on
-- each rule ix_bucket and ix_headers (what the index keys it by) and ix_all (its check needs
-- every header). Returns the index; its `headers` is true when some rule reads a header (the
-- caller makes sure the table holds what indexed() promised before a lookup).
function _M.new(list, indexed)
    local apps, methods, buckets = {}, {}, {}
    local reads = false
    for i = 1, #list do
        local r = list[i]
        if r.app_ids then
            for id in pairs(r.app_ids) do
                apps[id] = true
            end
        end
        if r.methods then
            for m in pairs(r.methods) do
                methods[m] = true
            end
        end
        r.ix_bucket = r.bucket or (r.path and _M.glob_bucket(r.path)) or nil
        if r.ix_bucket then
            buckets[r.ix_bucket] = true
        end
        local hm = header_map(r)
        r.ix_all = r.user_header ~= nil and not indexed(r.user_header)
        if hm then
            for name in pairs(hm) do
                if not indexed(name) then
                    hm[name] = nil
                    r.ix_all = true
                end
            end
            if next(hm) == nil then
                hm = nil
            end
        end
        r.ix_headers = hm
        reads = reads or r.headers ~= nil or r.scope == "user"
    end
    return { list = list, apps = apps, methods = methods, buckets = buckets, memo = {}, n = 0,
             headers = reads }
end

-- The node of (app key, method key): the rules that accept both, the levels below it (BUCKET
-- first when one of them has a bucket, then each header name one of them is keyed by) and,
-- with no level, the list itself.
local BUCKET = 1
local function node(ix, ak, mk)
    local rules, levels, names = {}, {}, {}
    local list, has_bucket = ix.list, false
    for i = 1, #list do
        local r = list[i]
        if (not r.app_ids or (ak and r.app_ids[ak]))
                and (not r.methods or (mk and r.methods[mk])) then
            rules[#rules + 1] = r
            has_bucket = has_bucket or r.ix_bucket ~= nil
            if r.ix_headers then
                for name, v in pairs(r.ix_headers) do
                    local vs = names[name]
                    if not vs then
                        vs = {}
                        names[name] = vs
                    end
                    vs[v] = true
                end
            end
        end
    end
    local nd = { rules = rules, levels = levels, values = names, tree = {} }
    if has_bucket then
        levels[1] = BUCKET
    end
    local hn = {}
    for name in pairs(names) do
        hn[#hn + 1] = name
    end
    sort(hn)
    for i = 1, #hn do
        levels[#levels + 1] = hn[i]
    end
    nd.nl = #levels
    ix.n = ix.n + 1
    return nd
end

-- The candidates of node nd under level keys k[1..nl], in priority order; need_all is true
-- when one of them matches on or takes its user from a header the index does not hold.
local function build(ix, nd, k)
    local out = { need_all = false }
    local rules, levels = nd.rules, nd.levels
    for i = 1, #rules do
        local r = rules[i]
        local ok = true
        for j = 1, nd.nl do
            local lv, key = levels[j], k[j]
            if lv == BUCKET then
                ok = r.ix_bucket == nil or r.ix_bucket == key
            else
                local want = r.ix_headers and r.ix_headers[lv]
                ok = want == nil or key == ANY or want == key
            end
            if not ok then
                break
            end
        end
        if ok then
            out[#out + 1] = r
            if r.ix_all then
                out.need_all = true
            end
        end
    end
    ix.n = ix.n + 1
    return out
end

local keys = {}                 -- scratch of lookup (which never yields)

-- The key of level lv of node nd for this request.
local function key_of(ix, nd, lv, bucket, h)
    if lv == BUCKET then
        local b = bucket()
        return ix.buckets[b] and b or false
    end
    local v = h[lv]
    if type(v) == "string" then
        return nd.values[lv][v] and v or false
    end
    return v ~= nil and ANY or false
end

-- The list under keys[1..nl] (built and kept the first time), the tables on the way created.
local function slow(ix, nd, bucket, h)
    local nl = nd.nl
    for j = 1, nl do
        keys[j] = key_of(ix, nd, nd.levels[j], bucket, h)
    end
    local t = nd.tree
    for j = 1, nl - 1 do
        local nx = t[keys[j]]
        if not nx then
            nx = {}
            t[keys[j]] = nx
        end
        t = nx
    end
    local l = t[keys[nl]]
    if not l then
        l = build(ix, nd, keys)
        t[keys[nl]] = l
    end
    return l
end

--- The candidate rules of a request of app id `app` and `method`, in priority order (a list
-- with need_all: read every header before checking them). bucket() gives the request's
-- bucket ("" when it has none); h its headers. Up to three levels (the bucket and two header
-- names) a known signature is found without a loop (a loop would end the request path's
-- compiled trace).
function _M.lookup(ix, app, method, bucket, h)
    if ix.n >= _M.MAX then
        ix.memo, ix.n = {}, 0
    end
    local ak = ix.apps[app] and app or false
    local mk = ix.methods[method] and method or false
    local m = ix.memo[ak]
    if not m then
        m = {}
        ix.memo[ak] = m
    end
    local nd = m[mk]
    if not nd then
        nd = node(ix, ak, mk)
        m[mk] = nd
    end
    local nl = nd.nl
    if nl == 0 then
        local l = nd.list
        if not l then
            l = build(ix, nd, keys)
            nd.list = l
        end
        return l
    end
    if nl > 3 then
        return slow(ix, nd, bucket, h)
    end
    local levels = nd.levels
    local t = nd.tree[key_of(ix, nd, levels[1], bucket, h)]
    if t and nl > 1 then
        t = t[key_of(ix, nd, levels[2], bucket, h)]
        if t and nl > 2 then
            t = t[key_of(ix, nd, levels[3], bucket, h)]
        end
    end
    return t or slow(ix, nd, bucket, h)
end

return _M
