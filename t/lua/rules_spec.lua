-- Pure logic of the rules: CIDR and client IP, path globs, rule validation, and the window
-- math of the node algorithms on an in-memory dict with a fake clock.
package.path = "lua/?.lua;./?.lua;" .. package.path
local ipmatch = require("tollgate.request.ipmatch")
local cjson = require("cjson.safe")
local corpus = require("t.lua.corpus")

-- the modules below only read ngx.* when called in nginx; keys needs nothing
_G.ngx = _G.ngx or { log = function() end, ERR = 0 }
local parse = require("tollgate.rules.parse")
local algo = require("tollgate.rules.local")

-- a shared dict with the semantics tollgate uses (incr with init and TTL, add, set, get)
local function fake_dict(clock)
    local d = { v = {}, exp = {} }
    local function live(k)
        local e = d.exp[k]
        if e and e <= clock.t then
            d.v[k], d.exp[k] = nil, nil
        end
        return d.v[k]
    end
    function d.get(_, k) return live(k) end
    function d.set(_, k, v, ttl)
        d.v[k] = v
        d.exp[k] = (ttl and ttl > 0) and clock.t + ttl or nil
        return true
    end
    function d.add(self, k, v, ttl)
        if live(k) ~= nil then return false end
        return self:set(k, v, ttl)
    end
    function d.delete(_, k) d.v[k] = nil end
    function d.expire(_, k, ttl)
        if live(k) == nil then return nil, "not found" end
        d.exp[k] = (ttl and ttl > 0) and clock.t + ttl or nil
        return true
    end
    function d.incr(self, k, n, init, ttl)
        local v = live(k)
        if v == nil then
            if init == nil then return nil, "not found" end
            self:set(k, init, ttl)
            v = init
        end
        d.v[k] = v + n
        return v + n
    end
    return d
end

describe("ipmatch", function()
    it("parses IPv4 and IPv6 and maps ::ffff:a.b.c.d to IPv4", function()
        assert.are.equal("\10\0\0\1", ipmatch.parse("10.0.0.1"))
        assert.is_nil(ipmatch.parse("256.0.0.1"))
        assert.is_nil(ipmatch.parse("1.2.3"))
        assert.are.equal(16, #ipmatch.parse("2001:db8::1"))
        assert.are.equal(ipmatch.parse("2001:db8:0:0:0:0:0:1"), ipmatch.parse("2001:db8::1"))
        assert.are.equal(ipmatch.parse("::1"), ipmatch.parse("0:0:0:0:0:0:0:1"))
        assert.are.equal("\10\0\0\1", ipmatch.parse("::ffff:10.0.0.1"))
        for _, bad in ipairs({ "1::2::3", "12345::", "g::1", "1:2:3:4:5:6:7:8:9", "",
                               "::ffff:1.2.3" }) do
            assert.is_nil(ipmatch.parse(bad), bad)
        end
    end)

    it("matches CIDR blocks bit by bit", function()
        local function inside(c, a)
            return ipmatch.contains(assert(ipmatch.parse_cidr(c)), ipmatch.parse(a))
        end
        assert.is_true(inside("10.0.0.0/8", "10.255.1.2"))
        assert.is_false(inside("10.0.0.0/8", "11.0.0.1"))
        assert.is_true(inside("192.168.4.0/22", "192.168.7.255"))
        assert.is_false(inside("192.168.4.0/22", "192.168.8.0"))
        assert.is_true(inside("0.0.0.0/0", "8.8.8.8"))
        assert.is_true(inside("1.2.3.4", "1.2.3.4"))
        assert.is_false(inside("1.2.3.4/32", "1.2.3.5"))
        assert.is_true(inside("2001:db8::/32", "2001:db8:ffff::1"))
        assert.is_false(inside("2001:db8::/33", "2001:db8:8000::1"))
        assert.is_false(inside("10.0.0.0/8", "::1"))           -- families never mix
        assert.is_true(inside("::ffff:10.0.0.0/104", "10.1.2.3"))
        assert.is_nil(ipmatch.parse_cidr("10.0.0.0/33"))
        assert.is_nil(ipmatch.parse_cidr("::/129"))
        assert.is_nil(ipmatch.parse_list("10.0.0.0/8,bogus"))
        assert.are.equal(2, #ipmatch.parse_list(" 10.0.0.0/8 , ::1/128 "))
    end)

    it("walks X-Forwarded-For from the right past trusted proxies", function()
        local trusted = ipmatch.parse_list("10.0.0.0/8")
        assert.are.equal("1.1.1.1", (ipmatch.client("10.0.0.1", "1.1.1.1", trusted)))
        assert.are.equal("2.2.2.2",
            (ipmatch.client("10.0.0.1", "1.1.1.1, 2.2.2.2, 10.0.0.9", trusted)))
        assert.are.equal("2.2.2.2", (ipmatch.client("10.0.0.1", { "1.1.1.1", "2.2.2.2" }, trusted)))
        -- an untrusted peer's header is ignored
        assert.are.equal("3.3.3.3", (ipmatch.client("3.3.3.3", "1.1.1.1", trusted)))
        assert.are.equal("3.3.3.3", (ipmatch.client("3.3.3.3", "1.1.1.1", {})))
        -- every hop trusted: the left-most; garbage: the last trusted hop
        assert.are.equal("10.0.0.7", (ipmatch.client("10.0.0.1", "10.0.0.7, 10.0.0.8", trusted)))
        assert.are.equal("10.0.0.8", (ipmatch.client("10.0.0.1", "nonsense, 10.0.0.8", trusted)))
        assert.are.equal("2001:db8::1", (ipmatch.client("10.0.0.1", "2001:db8::1", trusted)))
    end)
end)

describe("rules_parse", function()
    it("compiles path globs: * within a segment, ** across (more in glob_spec)", function()
        local glob = require("tollgate.rules.glob")
        local function m(g, p)
            local r = assert(parse.parse("g", cjson.encode({ id = "g", scope = "endpoint",
                algorithm = "fixed_window", limit = 1, window_seconds = 1, match = { path = g } })))
            return glob.match(r.path_glob, p)
        end
        assert.is_true(m("/photos/*/raw/*", "/photos/a/raw/b.jpg"))
        assert.is_false(m("/photos/*/raw/*", "/photos/a/b/raw/c"))
        assert.is_false(m("/photos/*/raw/*", "/photos/a/raw/b/c"))
        assert.is_true(m("/logs/**", "/logs/a/b/c"))
        assert.is_true(m("/a/**/z", "/a/b/c/z"))
        assert.is_true(m("/a.b-c+(d)%", "/a.b-c+(d)%"))
        assert.is_false(m("/a.b", "/aXb"))
        assert.is_false(m("/x/*", "/x/a/"))
    end)

    it("parses RFC 3339 times", function()
        assert.are.equal(0, parse.rfc3339("1970-01-01T00:00:00Z"))
        assert.are.equal(1795219200, parse.rfc3339("2026-11-21T00:00:00Z"))
        assert.are.equal(1795219200, parse.rfc3339("2026-11-21T08:00:00+08:00"))
        assert.are.equal(1795219200.5, parse.rfc3339("2026-11-21T00:00:00.5Z"))
        assert.is_nil(parse.rfc3339("2026-11-21"))
        assert.is_nil(parse.rfc3339("2026-13-01T00:00:00Z"))
    end)

    local good = { id = "r1", scope = "user", user_key = "header:X-User-Id",
                   match = { app_ids = { "demo-p1" }, methods = { "PUT" },
                             cidrs = { "10.0.0.0/8" } },
                   algorithm = "token_bucket", limit = 10, window_seconds = 1,
                   action = "throttle", throttle_max_delay_ms = 200, effective_to = cjson.null }

    local function with(t)
        local c = cjson.decode(cjson.encode(good))
        for k, v in pairs(t) do
            c[k] = v
        end
        return cjson.encode(c)
    end

    it("accepts a good rule with defaults", function()
        local r = assert(parse.parse("r1", with({})))
        assert.are.equal(10, r.burst)
        assert.are.equal("node", r.distribution)
        assert.are.equal("requests", r.unit)
        assert.are.equal(100, r.priority)
        assert.are.equal("x-user-id", r.user_header)
        assert.are.equal(0.2, r.max_delay)
        assert.is_true(r.app_ids["demo-p1"])
    end)

    -- the conformance corpus the API and the console run too (testdata/README.md)
    for _, c in ipairs(corpus.load("rules/valid.json")) do
        it("accepts the corpus rule: " .. c.name, function()
            local r, field, reason = parse.parse(c.rule.id, corpus.encode(c.rule))
            assert.is_table(r, tostring(field) .. " " .. tostring(reason))
        end)
    end
    for _, c in ipairs(corpus.load("rules/invalid.json")) do
        it("refuses the corpus rule: " .. c.name, function()
            local r, field, reason = parse.parse(c.rule.id, corpus.encode(c.rule))
            assert.is_nil(r)
            assert.are.same({ c.field, c.reason }, { field, reason })
        end)
    end

    it("refuses what only a stored entry can get wrong", function()
        local cases = {
            { "r1", with({ id = "other" }), "id", "id_mismatch" },
            { "r1", with({ match = { colour = "red" } }), "match.colour", "unknown_field" },
            { "r1", "{not json", "json", "invalid_json" },
            { "r1", "[1, 2]", "json", "invalid_json" },
        }
        for _, c in ipairs(cases) do
            local r, field, reason = parse.parse(c[1], c[2])
            assert.is_nil(r)
            assert.are.same({ c[3], c[4] }, { field, reason })
        end
    end)
end)

describe("rules_local", function()
    local function sleep_of(clock) return function(s) clock.t = clock.t + s end end
    local function now_of(clock) return function() return clock.t end end

    before_each(function()
        algo.set_workers(1)
        algo.set_state({})
    end)

    it("sub-windows: 10 below 10 s, one per second up to 60, then 60", function()
        assert.are.same({ 10, 0.1 }, { algo.sub_windows(1) })
        assert.are.same({ 30, 1 }, { algo.sub_windows(30) })
        assert.are.same({ 60, 1440 }, { algo.sub_windows(86400) })
    end)

    -- the window-boundary property, on random arrival times
    local function run(fn, r, seed, steps)
        local clock = { t = 1000 + seed * 0.37 }
        local d = fake_dict(clock)
        math.randomseed(seed)
        local admitted = {}
        for _ = 1, steps do
            clock.t = clock.t + math.random() * r.window / r.limit * 0.5
            local units = r.unit_cost and math.random(1, 3) or 1
            if fn(d, "k", r, units, clock.t, 0, sleep_of(clock), now_of(clock)) then
                admitted[#admitted + 1] = { clock.t, units }
            end
        end
        return admitted
    end

    local function max_in_window(adm, w)
        local best, j, sum = 0, 1, 0
        for i = 1, #adm do
            sum = sum + adm[i][2]
            while adm[i][1] - adm[j][1] > w do
                sum = sum - adm[j][2]
                j = j + 1
            end
            if sum > best then best = sum end
        end
        return best
    end

    it("sliding window: no interval of window length admits more than the limit", function()
        for seed = 1, 30 do
            for _, w in ipairs({ 1, 7, 60, 3600 }) do
                local r = { limit = 20, window = w, unit_cost = seed % 2 == 0 }
                local adm = run(algo.sliding, r, seed, 600)
                assert.is_true(max_in_window(adm, w) <= 20, "seed " .. seed .. " window " .. w)
                assert.is_true(#adm >= 20)
            end
        end
    end)

    it("fixed window: admits about 2 x limit across a boundary", function()
        local r = { limit = 20, window = 10 }
        local clock = { t = 1009.0 }
        local d = fake_dict(clock)
        local n = 0
        for _ = 1, 25 do   -- 9.0 .. 9.5 s into the window
            clock.t = clock.t + 0.02
            if algo.fixed(d, "k", r, 1, clock.t, 0) then n = n + 1 end
        end
        clock.t = 1010.01
        for _ = 1, 25 do
            clock.t = clock.t + 0.02
            if algo.fixed(d, "k", r, 1, clock.t, 0) then n = n + 1 end
        end
        assert.are.equal(40, n)   -- within about 1.5 s of a 10 s window
    end)

    it("token bucket: burst at once, then the rate; throttle delays within the bound", function()
        local clock = { t = 500 }
        local d = fake_dict(clock)
        local r = { limit = 10, window = 1, burst = 5 }
        local n = 0
        for _ = 1, 8 do
            if algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)) then n = n + 1 end
        end
        assert.are.equal(5, n)
        local ok, _, retry = algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock))
        local delay
        assert.is_false(ok)
        assert.is_true(math.abs(retry - 0.1) < 1e-9)
        ok, delay = algo.token(d, "k", r, 1, clock.t, 0.25, sleep_of(clock))
        assert.is_true(ok)
        assert.is_true(math.abs(delay - 0.1) < 1e-9)
        ok, delay = algo.token(d, "k", r, 1, clock.t, 0.25, sleep_of(clock))
        assert.is_true(ok and math.abs(delay - 0.2) < 1e-9)
        assert.is_false(algo.token(d, "k", r, 1, clock.t, 0.25, sleep_of(clock)))
        clock.t = clock.t + 10          -- full again; the state entry has expired
        assert.is_nil(d:get("k"))
        assert.is_true(algo.token(d, "k", r, 5, clock.t, 0, sleep_of(clock)))
        assert.is_false(algo.token(d, "k", r, 6, clock.t, 0, sleep_of(clock)))
    end)

    -- Worker chunks: several workers (each its own local state) on one dict.
    local function workers_of(n)
        algo.set_workers(n)
        local st = {}
        for i = 1, n do st[i] = {} end
        return function(i) algo.set_state(st[i]) end
    end

    it("fixed window with chunks: three workers admit exactly the limit", function()
        local clock = { t = 2000.5 }
        local d = fake_dict(clock)
        local r = { limit = 8192, window = 10 }
        local as = workers_of(3)
        assert.are.equal(8, algo.chunk(r))
        math.randomseed(7)
        local n = 0
        for _ = 1, 12000 do
            as(math.random(1, 3))
            if algo.fixed(d, "k", r, 1, clock.t, 0) then n = n + 1 end
        end
        assert.are.equal(8192, n)
        assert.is_true(d:get("k:200") <= 8192)
        -- far fewer dict operations than requests: the chunks were spent locally
        local calls = 0
        local incr = d.incr
        d.incr = function(...) calls = calls + 1; return incr(...) end
        clock.t = 2010.5
        for i = 1, 3000 do
            as(i % 3 + 1)
            algo.fixed(d, "k", r, 1, clock.t, 0)
        end
        assert.is_true(calls < 3000 / 4, "dict calls " .. calls)
    end)

    it("sliding window with chunks: no interval of window length admits more than the limit",
        function()
        for seed = 1, 6 do
            for _, w in ipairs({ 1, 60 }) do
                local r = { limit = 10240, window = w, unit_cost = seed % 2 == 0 }
                assert.is_true(algo.chunk(r) > 0)
                local as = workers_of(3)
                local clock = { t = 1000 + seed * 0.37 }
                local d = fake_dict(clock)
                math.randomseed(seed)
                local adm = {}
                for _ = 1, 40000 do
                    clock.t = clock.t + math.random() * w / r.limit * 0.5
                    as(math.random(1, 3))
                    local units = r.unit_cost and math.random(1, 3) or 1
                    if algo.sliding(d, "k", r, units, clock.t, 0) then
                        adm[#adm + 1] = { clock.t, units }
                    end
                end
                local m = max_in_window(adm, w)
                assert.is_true(m <= r.limit, "seed " .. seed .. " window " .. w .. ": " .. m)
                assert.is_true(m >= r.limit * 0.95, "seed " .. seed .. " window " .. w .. ": " .. m)
            end
        end
    end)

    it("token bucket with chunks: exactly the burst at one instant, then the rate", function()
        local clock = { t = 700 }
        local d = fake_dict(clock)
        local r = { limit = 1024000, window = 1, burst = 20000 }
        local as = workers_of(3)
        assert.are.equal(19, algo.chunk(r, true))
        math.randomseed(3)
        local n = 0
        for _ = 1, 25000 do
            as(math.random(1, 3))
            if algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)) then n = n + 1 end
        end
        assert.are.equal(20000, n)
        -- then 2 x the rate for 50 ms in 1 ms steps: the burst is spent, the rate passes
        n = 0
        for _ = 1, 50 do
            clock.t = clock.t + 0.001
            for _ = 1, 2048 do
                as(math.random(1, 3))
                if algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)) then n = n + 1 end
            end
        end
        assert.is_true(n <= 50 * 1024 + 1, "admitted " .. n)
        assert.is_true(n >= 50 * 1024 - 3 * 19, "admitted " .. n)
    end)

    -- One token of 10^9 per 60 s lasts 6e-8 s, less than the spacing of doubles at a Unix
    -- timestamp (2.4e-7 s): float time-stamps never drain such a bucket.
    it("token bucket at high rates: the burst is spent at one instant, then refused", function()
        for _, c in ipairs({ { 1e9, 60, 5 }, { 1e12, 1, 3 }, { 1e12, 86400, 7 },
                             { 999999999989, 86399, 4 }, { 4200001, 1, 2 } }) do
            algo.set_state({})
            local clock = { t = 1767225600.123 }
            local d = fake_dict(clock)
            local r = { limit = c[1], window = c[2], burst = c[3] }
            local n = 0
            for _ = 1, 20 do
                if algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)) then n = n + 1 end
            end
            assert.are.equal(c[3], n, "limit " .. c[1] .. " per " .. c[2] .. " s")
            -- the next millisecond refills what it refills, capped at the burst
            clock.t = clock.t + 0.001
            local want = math.min(c[3], math.floor(c[1] / c[2] / 1000))
            n = 0
            for _ = 1, 20 do
                if algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)) then n = n + 1 end
            end
            assert.is_true(n >= want and n <= c[3], "refill after 1 ms: " .. n)
        end
    end)

    it("token bucket: exact at any rate under a saturating load (integer token time)", function()
        -- after every step the bucket is empty, so the next step admits exactly what the grid
        -- refilled in between (floor or ceil of ms x rate, by the grid's phase), capped at burst
        for _, c in ipairs({ { 7, 3, 2 }, { 999983, 7, 1000 }, { 1e12, 60, 1000 }, { 3, 1, 1 },
                             { 1e9, 60, 40000 }, { 86399, 86400, 5 } }) do
            algo.set_state({})
            local r = { limit = c[1], window = c[2], burst = c[3] }
            local clock = { t = 1767225600.5 }
            local d = fake_dict(clock)
            local total, refilled = 0, 0
            math.randomseed(c[1] % 1000)
            for step = 1, c[3] > 100 and 300 or 3000 do
                local dt = step == 1 and 0 or math.random(0, 3)
                clock.t = math.floor(clock.t * 1000 + dt + 0.5) / 1000
                local n = 0
                while algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)) do
                    n = n + 1
                end
                local refill = dt * c[1] / (1000 * c[2])
                refilled = refilled + refill
                local lo = step == 1 and c[3] or math.min(c[3], math.floor(refill))
                local hi = step == 1 and c[3] or math.min(c[3], math.ceil(refill))
                assert.is_true(n >= lo and n <= hi, ("limit %d/%d s step %d: %d not in [%d, %d]")
                    :format(c[1], c[2], step, n, lo, hi))
                total = total + n
            end
            if c[3] >= c[1] / c[2] * 0.003 then   -- no step capped: the totals add up
                assert.is_true(math.abs(total - c[3] - refilled) <= 1, "total " .. total)
            end
        end
        -- a huge burst at a tiny rate: 1e12 tokens at once, then one a day (the grid emits
        -- it at each multiple of 86400 s since the epoch)
        algo.set_state({})
        local r = { limit = 1, window = 86400, burst = 1e12 }
        local clock = { t = 1767225600 }
        local d = fake_dict(clock)
        for _ = 1, 10 do
            assert.is_true(algo.token(d, "k", r, 1e11, clock.t, 0, sleep_of(clock)))
        end
        assert.is_false(algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)))
        clock.t = clock.t + 86399.999
        assert.is_false(algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)))
        clock.t = clock.t + 0.001
        assert.is_true(algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)))
        assert.is_false(algo.token(d, "k", r, 1, clock.t, 0, sleep_of(clock)))
    end)

    it("token bucket: updates interleaved between read and incr stay exact", function()
        -- another worker's whole check runs between this worker's get and incr (nested, as
        -- if it had run on another CPU at that moment); the conflict must be noticed and the
        -- decision recomputed on the value the addition landed on
        local clock = { t = 1767225600.25 }
        local d = fake_dict(clock)
        local as = workers_of(3)
        local r = { limit = 6000, window = 60, burst = 50 }   -- 1 token / 10 ms, no chunks
        local incr, depth = d.incr, 0
        local n, conflicts, refill = 0, 0, 0
        local function check(w, units)
            as(w)
            if algo.token(d, "k", r, units, clock.t, 0, sleep_of(clock)) then n = n + units end
        end
        d.incr = function(self, k, v, ...)
            if depth < 2 and math.random() < 0.6 then
                depth = depth + 1
                conflicts = conflicts + 1
                check(depth % 3 + 1, math.random(1, 3))
                depth = depth - 1
            end
            return incr(self, k, v, ...)
        end
        math.randomseed(11)
        for round = 1, 40 do
            n = 0
            for _ = 1, 60 do
                check(math.random(1, 3), math.random(1, 3))
            end
            -- every round starts full (idle for a second) or empty with what 31 ms refilled:
            -- 3 or 4 tokens (one per multiple of 10 ms since the epoch)
            if round % 2 == 1 then
                assert.are.equal(50, n, "full bucket, round " .. round)
                local x0 = math.floor(clock.t * 1000 + 0.5)
                clock.t = clock.t + 0.031
                refill = math.floor((x0 + 31) / 10) - math.floor(x0 / 10)
            else
                assert.is_true(n >= refill - 2 and n <= refill,
                    refill .. " tokens refilled, round " .. round .. ": " .. n)
                clock.t = clock.t + 1
            end
        end
        assert.is_true(conflicts > 100)
    end)

    it("fixed window throttle takes from the next window", function()
        local clock = { t = 99.8 }
        local d = fake_dict(clock)
        local r = { limit = 1, window = 1 }
        assert.is_true(algo.fixed(d, "k", r, 1, clock.t, 0.5))
        local ok, delay = algo.fixed(d, "k", r, 1, clock.t, 0.5)
        assert.is_true(ok)
        assert.is_true(math.abs(delay - 0.2) < 1e-6)
        assert.is_false(algo.fixed(d, "k", r, 1, clock.t, 0.5))
    end)
end)
