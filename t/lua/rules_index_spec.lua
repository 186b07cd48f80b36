-- The rule index (tollgate.rules.index): on the match corpus (testdata/rules/match.json) the
-- candidates of every request, checked with the contract's semantics, are exactly the rules
-- the case expects, in priority order; the index never leaves out a rule that matches.
package.path = "lua/?.lua;./?.lua;" .. package.path
_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
ngx.var = ngx.var or {}
rawset(ngx, "md5", ngx.md5 or function(s) return "md5:" .. s end)
local cjson = require("cjson.safe")
local corpus = require("t.lua.corpus")
local parse = require("tollgate.rules.parse")
local glob = require("tollgate.rules.glob")
local index = require("tollgate.rules.index")
local match = require("tollgate.rules.match")
match.init({ trusted_proxies = {} })

local function indexed(name)
    return #name <= 64
end

-- a corpus rule: shadow, far from its limit, scope global unless it says
local function rule(c)
    local body = { algorithm = "fixed_window", limit = 1000000, window_seconds = 60,
                   action = "shadow", scope = "global" }
    for k, v in pairs(c) do
        body[k] = v
    end
    return assert(parse.parse(c.id, cjson.encode(body)))
end

local function compile(rules)
    local list = {}
    for i, c in ipairs(rules) do
        list[i] = rule(c)
    end
    table.sort(list, index.before)
    return index.new(list, indexed), list
end

-- the request's headers as nginx gives them: lower-case names, a repeated one a list
local function headers_of(h)
    local t = {}
    for k, v in pairs(h or {}) do
        t[k:lower()] = v
    end
    return t
end

local function split(path)
    local slash = path:find("/", 2, true)
    if path:byte(1) ~= 47 or slash == 2 then
        return "", ""
    elseif not slash then
        return path:sub(2), ""
    end
    return path:sub(2, slash - 1), path:sub(slash + 1)
end

local function has(v, x)
    if v == x then
        return true
    end
    if type(v) == "table" then
        for _, e in ipairs(v) do
            if e == x then
                return true
            end
        end
    end
    return false
end

-- the contract's semantics (docs/rules-contract.md §2), rule by rule, without the index
local function matches(r, q, h)
    local b, k = split(q.path)
    if (r.app_ids and not r.app_ids[q.app]) or (r.methods and not r.methods[q.method])
            or (r.bucket and r.bucket ~= b)
            or (r.key_prefix and k:sub(1, #r.key_prefix) ~= r.key_prefix)
            or (r.path_glob and not glob.match(r.path_glob, q.path)) then
        return false
    end
    assert(not r.cidrs, "the corpus runs without client addresses")
    for _, p in ipairs(r.headers or {}) do
        if not has(h[p[1]], p[2]) then
            return false
        end
    end
    if r.scope == "user" then
        local u = h[r.user_header]
        return type(u) == "string" and u ~= ""
    end
    return true
end

local function ids(list, q, h)
    local out = {}
    for _, r in ipairs(list) do
        if matches(r, q, h) then
            out[#out + 1] = r.id
        end
    end
    return out
end

local function lookup(ix, q, h)
    return index.lookup(ix, q.app, q.method, function() return (split(q.path)) end, h)
end

-- the gateway's own check of each candidate (tollgate.rules.match), on the request as nginx
-- gives it ($uri, $remote_addr, the headers table)
local function gateway_ids(list, q, h)
    ngx.var.uri, ngx.var.remote_addr = q.path, "127.0.0.1"
    match.begin(h, q.app)
    local out = {}
    for _, r in ipairs(list) do
        if match.matches(r) then
            out[#out + 1] = r.id
        end
    end
    return out
end

describe("rules_index", function()
    for _, c in ipairs(corpus.load("rules/match.json")) do
        it("corpus: " .. c.name, function()
            local ix, all = compile(c.rules)
            for _, q in ipairs(c.requests) do
                local what = q.method .. " " .. q.app .. " " .. q.path .. " "
                    .. cjson.encode(q.headers or {})
                local h = headers_of(q.headers)
                assert.are.same(q.match, ids(all, q, h), "the corpus itself: " .. what)
                local cands = lookup(ix, q, h)
                assert.are.same(q.match, ids(cands, q, h), "candidates of " .. what)
                assert.are.same(q.match, gateway_ids(cands, q, h), "the gateway's check: " .. what)
                for i = 2, #cands do
                    assert.is_true(index.before(cands[i - 1], cands[i]), "order of " .. what)
                end
                assert.are.equal(cands, lookup(ix, q, h), "kept for " .. what)
            end
        end)
    end

    it("leaves out the rules of other apps, methods, buckets and header values", function()
        local ix = compile({
            { id = "p1", match = { app_ids = { "p1" } } },
            { id = "puts", match = { methods = { "PUT" } } },
            { id = "photos", scope = "endpoint", match = { bucket = "photos" } },
            { id = "logs", scope = "endpoint", match = { path = "/logs/**" } },
            { id = "gold", scope = "endpoint", match = { headers = { ["X-Tier"] = "gold" } } },
            { id = "any" },
        })
        local q = { app = "p0", method = "GET", path = "/b/k" }
        local l = lookup(ix, q, {})
        assert.are.same({ "any" }, ids(l, q, {}))
        assert.are.equal(1, #l)
        -- what no rule names shares the list of "any other value"
        assert.are.equal(l, lookup(ix, { app = "p9", method = "GET", path = "/c/k" },
            { ["x-tier"] = "silver" }))
        assert.are.equal(2, #lookup(ix, { app = "p0", method = "GET", path = "/photos/k" }, {}))
        assert.are.equal(2, #lookup(ix, { app = "p0", method = "GET", path = "/logs/a/b" }, {}))
        assert.are.equal(2, #lookup(ix, q, { ["x-tier"] = "gold" }))
    end)

    it("asks for the bucket only when a rule of the app and method has one", function()
        local ix = compile({ { id = "p0", match = { app_ids = { "p0" } } },
                             { id = "b", scope = "endpoint",
                               match = { app_ids = { "p1" }, bucket = "b" } } })
        local asked = 0
        local function bucket()
            asked = asked + 1
            return "b"
        end
        index.lookup(ix, "p0", "GET", bucket, {})
        assert.are.equal(0, asked)
        local first = index.lookup(ix, "p1", "GET", bucket, {})
        assert.is_true(asked >= 1)
        asked = 0
        assert.are.equal(first, index.lookup(ix, "p1", "GET", bucket, {}))
        assert.are.equal(1, asked, "a known signature asks once")
    end)

    it("finds a signature of four levels (the bucket and three header names)", function()
        local ix = compile({
            { id = "b", scope = "endpoint", match = { bucket = "b" } },
            { id = "x", scope = "endpoint", match = { headers = { ["X-A"] = "1" } } },
            { id = "y", scope = "endpoint", match = { headers = { ["X-B"] = "1" } } },
            { id = "z", scope = "endpoint",
              match = { headers = { ["X-C"] = "1", ["X-A"] = "1" } } },
        })
        local q = { app = "a", method = "GET", path = "/b/k" }
        local h = { ["x-a"] = "1", ["x-c"] = "1" }
        local l = lookup(ix, q, h)
        assert.are.same({ "b", "x", "z" }, ids(l, q, h))
        assert.are.equal(3, #l)
        assert.are.equal(l, lookup(ix, q, h))
        assert.are.equal(1, #lookup(ix, q, {}))
    end)

    it("a repeated header makes every value of it a candidate; the check decides", function()
        local ix = compile({
            { id = "free", scope = "endpoint", match = { headers = { ["X-Tier"] = "free" } } },
            { id = "gold", scope = "endpoint", match = { headers = { ["X-Tier"] = "gold" } } },
        })
        local l = lookup(ix, { app = "a", method = "GET", path = "/" },
            { ["x-tier"] = { "paid", "silver" } })
        assert.are.equal(2, #l)
    end)

    it("a header name too long to be read alone makes the candidate read every header", function()
        local long = "X-" .. string.rep("a", 70)
        local ix = compile({
            { id = "long", scope = "endpoint", match = { headers = { [long] = "v" } } },
            { id = "short", scope = "endpoint", match = { headers = { ["X-Tier"] = "v" } } },
        })
        local l = lookup(ix, { app = "a", method = "GET", path = "/" }, {})
        assert.are.same({ "long" }, { l[1].id })
        assert.is_true(l.need_all)
        assert.is_false(lookup(ix, { app = "a", method = "GET", path = "/" },
            { ["x-tier"] = "v" })[2].ix_all)
    end)

    it("reads the access key of SigV4 and V2 credentials with plain finds", function()
        local ak = match.access_key
        assert.are.equal("AKID", ak("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/"
            .. "aws4_request, SignedHeaders=host, Signature=abc"))
        assert.are.equal("AKID", ak("AWS AKID:c2ln"))
        assert.are.equal("AK2", ak("X Credential=,bad Credential=AK2/x"))
        for _, bad in ipairs({ "AWS4-HMAC-SHA256 Credential=/x", "Credential=AK ID/x",
                               "Credential=AKID", "AWS :sig", "AWS AKID", "AWS AK ID:sig",
                               "aws AKID:sig", "Bearer x" }) do
            assert.is_nil(ak(bad), bad)
        end
        assert.is_nil(ak(nil))
        assert.is_nil(ak({ "AWS A:b", "AWS C:d" }))
    end)

    it("the selected bucket of a path glob", function()
        for g, b in pairs({ ["/photos/**"] = "photos", ["/photos/*/raw"] = "photos",
                            ["/photos"] = "photos", ["/a/b/c"] = "a" }) do
            assert.are.equal(b, index.glob_bucket(g), g)
        end
        for _, g in ipairs({ "/photo*", "//x", "/**", "/*/raw", "/*" }) do
            assert.is_nil(index.glob_bucket(g), g)
        end
    end)

    it("starts over beyond MAX lists", function()
        local max = index.MAX
        index.MAX = 3
        local ix = compile({ { id = "b", scope = "endpoint", match = { bucket = "b" } },
                             { id = "p0", match = { app_ids = { "p0", "p1", "p2" } } } })
        local first = lookup(ix, { app = "p0", method = "GET", path = "/b/k" }, {})
        lookup(ix, { app = "p1", method = "GET", path = "/b/k" }, {})
        lookup(ix, { app = "p2", method = "GET", path = "/b/k" }, {})
        local again = lookup(ix, { app = "p0", method = "GET", path = "/b/k" }, {})
        local n = ix.n
        index.MAX = max
        assert.are_not.equal(first, again)
        assert.are.same({ "b", "p0" }, { again[1].id, again[2].id })
        assert.is_true(n <= 3 + 2, "a lookup adds at most a node and a list: " .. n)
    end)
end)
