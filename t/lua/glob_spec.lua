-- Path globs of rules (tollgate.rules.glob): the contract's meaning (a table, and agreement
-- with the Lua pattern the gateway used before on thousands of random short globs and URIs),
-- and the work of the globs that made that pattern backtrack for minutes, counted in LuaJIT VM
-- instructions in a child process (JIT off, so that every instruction is counted) under a
-- generous time limit, so that a matcher that backtracks fails instead of hanging the suite.
package.path = "lua/?.lua;" .. package.path
local glob = require("tollgate.rules.glob")

local function m(g, uri) return glob.match(glob.compile(g), uri) end

-- the meaning as the gateway had it: a Lua pattern (exponential, so short inputs only)
local function oracle(g, uri)
    local p = g:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0")
    p = p:gsub("%*%*", "\1"):gsub("%*", "[^/]*"):gsub("\1", ".*")
    return uri:find("^" .. p .. "$") ~= nil
end

describe("rule path globs", function()
    it("match as the contract says: * within a segment, ** across", function()
        local cases = {
            { "/photos/*/raw/*", "/photos/a/raw/b.jpg", true },
            { "/photos/*/raw/*", "/photos/a/b/raw/c", false },
            { "/photos/*/raw/*", "/photos/a/raw/b/c", false },
            { "/photos/*/raw/*", "/photos//raw/", true },
            { "/logs/**", "/logs/a/b/c", true },
            { "/logs/**", "/logs/", true },
            { "/logs/**", "/logs", false },
            { "/a/**/z", "/a/b/c/z", true },
            { "/a/**/z", "/a//z", true },
            { "/a/**/z", "/a/z", false },
            { "/a.b-c+(d)%", "/a.b-c+(d)%", true },
            { "/a.b", "/aXb", false },
            { "/x/*", "/x/a/", false },
            { "/x/*", "/x/", true },
            { "/*", "/", true },
            { "/*", "/abc", true },
            { "/*", "/a/b", false },
            { "/**", "/", true },
            { "/**", "/a/b/c", true },
            { "/**.gz", "/a/b.gz", true },
            { "/**.gz", "/a/b.gzip", false },
            { "/*.gz", "/a/b.gz", false },
            { "/*.gz", "/b.gz", true },
            { "/**-**-**.gz", "/a-b-c.gz", true },
            { "/**-**-**.gz", "/a/-/-/.gz", true },
            { "/**-**-**.gz", "/a-b.gz", false },
            { "/*-*-*", "/a-b-c", true },
            { "/*-*-*", "/--", true },
            { "/*-*-*", "/a-b/-c", false },
            { "/*a*a*", "/xaya", true },
            { "/*a*a*", "/xa/a", false },
            { "/a/***", "/a/b/c", true },      -- three or more asterisks mean **
            { "/a/****b", "/a/x/yb", true },
            { "/a/**/b/*", "/a/x/y/b/z", true },
            { "/a/**/b/*", "/a/x/y/b/z/w", false },
            { "/a/**/b/*", "/a/b/b/z", true },
            { "/a/*/**", "/a/x", false },
            { "/a/*/**", "/a/x/", true },
            { "/exact", "/exact", true },
            { "/exact", "/exact/", false },
            { "/a?b[c]", "/a?b[c]", true },
            { "/a\nb*", "/a\nbc", true },
        }
        for _, c in ipairs(cases) do
            assert.are.equal(c[3], m(c[1], c[2]), c[1] .. " ~ " .. c[2]:gsub("\n", "\\n"))
            assert.are.equal(c[3], oracle(c[1], c[2]), "oracle: " .. c[1] .. " ~ " .. c[2])
        end
    end)

    it("agree with the former Lua pattern on random short globs and URIs", function()
        math.randomseed(19)
        local galpha, ualpha = { "/", "a", "b", "-", ".", "*", "*" }, { "/", "a", "b", "-", "." }
        local function rand(alpha, max)
            local t = {}
            for i = 1, math.random(0, max) do
                t[i] = alpha[math.random(#alpha)]
            end
            return table.concat(t)
        end
        local matched = 0
        for _ = 1, 20000 do
            local g, uri = "/" .. rand(galpha, 7), "/" .. rand(ualpha, 9)
            local want = oracle(g, uri)
            if want then
                matched = matched + 1
            end
            assert.are.equal(want, m(g, uri), g .. " ~ " .. uri)
        end
        assert.is_true(matched > 1000, "too few random matches to mean anything: " .. matched)
    end)

    -- In a fresh LuaJIT with the JIT off: the VM instructions (in thousands) of one match, and
    -- the CPU seconds of 20 (string.find's own work is C, which only the clock sees); nil and
    -- the output when the child does not finish within 30 s.
    local function work(g, uri_expr)
        local prog = ([[
            package.path = "lua/?.lua;" .. package.path
            jit.off()
            local glob = require("tollgate.rules.glob")
            local c, uri = glob.compile(%q), %s
            local n = 0
            debug.sethook(function() n = n + 1 end, "", 1000)
            local ok = glob.match(c, uri)
            debug.sethook()
            local t = os.clock()
            for _ = 1, 20 do
                glob.match(c, uri)
            end
            io.write(tostring(ok), " ", n, " ", os.clock() - t)
        ]]):format(g, uri_expr)
        local file = os.tmpname()
        local w = assert(io.open(file, "w"))
        w:write(prog)
        w:close()
        local f = assert(io.popen("timeout 30 luajit " .. file .. " 2>&1"))
        local out = f:read("*a")
        f:close()
        os.remove(file)
        local ok, n, cpu = out:match("^(%a+) (%d+) (%S+)$")
        return ok, tonumber(n), tonumber(cpu), out
    end

    it("take work linear in the URI on the globs that backtracked", function()
        local cases = {
            -- glob, URI of n bytes (as a Lua expression of n), whether it matches. The issue's:
            { "/**-**-**.gz", 'string.rep("-", %d)', "false" },
            { "/**-**-**-**.gz", 'string.rep("-", %d)', "false" },
            -- the same kind with prefix and suffix in place, so that the middle is matched in full
            { "/**-**x**-**.gz", '"/" .. string.rep("-", %d) .. ".gz"', "false" },
            { "/**-**-**-**.gz", '"/" .. string.rep("-", %d) .. ".gz"', "true" },
            { "/**a**a**a**b**c", '"/" .. string.rep("a", %d) .. "c"', "false" },
            { "/*-*-*-*-*.gz", '"/" .. string.rep("-", %d) .. "/.gz"', "false" },
            { "/*/**/*/**q**/*/x", 'string.rep("/a", %d) .. "/x"', "false" },
            { "/a/**/*-*-*", '"/a/" .. string.rep("-", %d) .. "/"', "false" },
            -- Lua patterns ('*' only, one per segment)
            { "/*-/*-/*-/*x", '"/" .. string.rep("-", %d) .. "/-/-/-"', "false" },
            { "/*/*/*/*/x", 'string.rep("/-", %d)', "false" },
            { "/*--/*--/*--", 'string.rep("/" .. string.rep("-", %d / 4), 3) .. "x"', "false" },
        }
        for _, c in ipairs(cases) do
            local ok1, w1, t1, out1 = work(c[1], c[2]:format(4000))
            assert.are.equal(c[3], ok1, c[1] .. " on 4000 bytes: " .. out1)
            local ok2, w2, t2, out2 = work(c[1], c[2]:format(16000))
            assert.are.equal(c[3], ok2, c[1] .. " on 16000 bytes: " .. out2)
            print(("%-20s %5dk / %5dk VM instructions, %.4f / %.4f s CPU for 20, 4000 / 16000"
                .. " bytes"):format(c[1], w1, w2, t1, t2))
            -- four times the URI, about four times the work; at most ~40 instructions per URI
            -- byte and glob byte; and what the clock sees grows no faster (when it sees anything)
            assert.is_true(w2 <= 4.5 * w1 + 5,
                ("%s: %dk then %dk instructions"):format(c[1], w1, w2))
            assert.is_true(w2 * 1000 <= 40 * 16000 * #c[1],
                ("%s: %dk instructions on 16000 bytes"):format(c[1], w2))
            assert.is_true(t2 < 0.05 or t2 <= 10 * t1,
                ("%s: %.3f s then %.3f s"):format(c[1], t1, t2))
        end
    end)
end)
