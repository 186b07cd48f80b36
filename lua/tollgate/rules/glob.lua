-- Path globs of rules (docs/rules-contract.md §2): '*' matches a run of bytes other than '/', '**'
-- (and any longer run of asterisks) a run of any bytes; every other byte stands for itself. Every
-- URI costs at most about #uri x #glob steps, whatever the glob (a Lua pattern with two '.*'
-- backtracked for minutes on a long URI). A glob is compiled once into one of:
--  * exact: no asterisk, a string comparison;
--  * pat: no '**' and a '/' between any two '*': a Lua pattern ('*' -> '[^/]*'). string.find
--    can end each '[^/]*' at one place only from which the '/' after it (or the end) matches,
--    so it never backtracks over more than the bytes of one segment and the glob's literal;
--  * otherwise its literal prefix, its literal suffix and the tokens between them: match()
--    compares prefix and suffix, then (when the middle is more than one star) simulates the
--    glob's automaton over the bytes between them, keeping the set of glob positions reachable
--    so far (no backtracking at all).
local byte = string.byte
local find = string.find
local gsub = string.gsub

local _M = {}

local STAR, DSTAR = -1, -2     -- tokens; any other token is the byte it matches
local SLASH = 47

--- Compile glob g (a string) into a matcher table for match().
function _M.compile(g)
    local toks, n = {}, #g
    local i = 1
    while i <= n do
        local c = byte(g, i)
        if c == 42 then
            local j = i
            while j < n and byte(g, j + 1) == 42 do
                j = j + 1
            end
            toks[#toks + 1] = j > i and DSTAR or STAR
            i = j + 1
        else
            toks[#toks + 1] = c
            i = i + 1
        end
    end
    local first, last = nil, nil
    for k = 1, #toks do
        if toks[k] < 0 then
            first = first or k
            last = k
        end
    end
    if not first then
        return { exact = g }
    end
    local safe, prev = true, nil       -- no '**', and a '/' between any two '*'
    for k = first, last do
        local t = toks[k]
        if t == DSTAR or (t == STAR and prev == STAR) then
            safe = false
            break
        elseif t == STAR or t == SLASH then
            prev = t
        end
    end
    if safe then
        local p = gsub(g, "[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0")
        return { pat = "^" .. gsub(p, "%*", "[^/]*") .. "$" }
    end
    local m = { pre = {}, suf = {}, mid = {} }
    for k = 1, first - 1 do
        m.pre[k] = toks[k]
    end
    for k = last + 1, #toks do
        m.suf[#m.suf + 1] = toks[k]
    end
    for k = first, last do
        m.mid[#m.mid + 1] = toks[k]
    end
    m.np, m.ns, m.nm = #m.pre, #m.suf, #m.mid
    if m.nm == 1 then
        m.one = m.mid[1]        -- the middle is one star: no automaton
    end
    return m
end

-- scratch of the simulation (match never yields, so one set per worker is enough)
local mark = {}                 -- glob position -> the step that last reached it
local stamp = 0
local set_a, set_b = {}, {}

-- Adds position i of toks to set (k entries so far) for step s, and the positions after it
-- that stars matching nothing make reachable too. Returns the new size.
local function add(set, k, toks, i, s)
    while mark[i] ~= s do
        mark[i] = s
        k = k + 1
        set[k] = i
        local t = toks[i]
        if t ~= STAR and t ~= DSTAR then
            break
        end
        i = i + 1
    end
    return k
end

--- Whether uri matches the compiled glob m.
function _M.match(m, uri)
    local pat = m.pat
    if pat then
        return find(uri, pat) ~= nil
    end
    if m.exact then
        return uri == m.exact
    end
    local n, np, ns = #uri, m.np, m.ns
    if n < np + ns then
        return false
    end
    local pre, suf = m.pre, m.suf
    for k = 1, np do
        if byte(uri, k) ~= pre[k] then
            return false
        end
    end
    local off = n - ns
    for k = 1, ns do
        if byte(uri, off + k) ~= suf[k] then
            return false
        end
    end
    local a, b = np + 1, n - ns          -- the bytes the middle must match
    local one = m.one
    if one == DSTAR then
        return true
    elseif one == STAR then
        local s = find(uri, "/", a, true)
        return s == nil or s > b
    end
    local toks, nm = m.mid, m.nm
    local cur, nxt = set_a, set_b
    stamp = stamp + 1
    local k = add(cur, 0, toks, 1, stamp)
    for p = a, b do
        local c = byte(uri, p)
        stamp = stamp + 1
        local s = stamp
        local k2 = 0
        for j = 1, k do
            local i = cur[j]
            local t = toks[i]
            if t == c then
                k2 = add(nxt, k2, toks, i + 1, s)
            elseif t == DSTAR or (t == STAR and c ~= SLASH) then
                k2 = add(nxt, k2, toks, i, s)
            end
        end
        if k2 == 0 then
            return false
        end
        if mark[nm] == s and toks[nm] == DSTAR then
            return true                 -- the last token is '**' and reached: the rest matches
        end
        cur, nxt, k = nxt, cur, k2
    end
    return mark[nm + 1] == stamp
end

return _M
