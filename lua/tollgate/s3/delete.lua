-- The keys a DeleteObjects request deletes, counted as the backend counts them: the <Object>
-- children of the <Delete> root of its XML body (any namespace prefix, whitespace and
-- attributes in tags; comments, CDATA and processing instructions skipped, never counted), the
-- body de-chunked first when it is sent aws-chunked (nginx itself de-chunks
-- `Transfer-Encoding: chunked`). The body is read bounded (`max` bytes, S3's DeleteObjects
-- takes at most 1000 keys) and refused as S3 refuses it: a body over the bound is
-- MaxMessageLengthExceeded, XML that is not well-formed (or a DTD, or more than 1000 keys)
-- is MalformedXML. count() and dechunk() are pure Lua; read() uses ngx.
local find = string.find
local sub = string.sub
local byte = string.byte
local lower = string.lower
local tonumber = tonumber
local type = type

local _M = {}

local MAX_KEYS = 1000       -- S3's limit of keys per DeleteObjects request
local MAX_DEPTH = 32
_M.MAX_KEYS = MAX_KEYS

local MALFORMED = "malformed_xml"
local TOO_LONG = "message_too_long"
_M.MALFORMED, _M.TOO_LONG = MALFORMED, TOO_LONG

local LT, GT, SLASH, QMARK, BANG = byte("<"), byte(">"), byte("/"), byte("?"), byte("!")
local EQ, DQ, SQ, COLON = byte("="), byte('"'), byte("'"), byte(":")

local function space(b)
    return b == 32 or b == 9 or b == 10 or b == 13
end

-- a byte that ends a name: whitespace, '/', '>', '=', '<', quotes, or the end
local function name_end(b)
    return b == nil or space(b) or b == SLASH or b == GT or b == EQ or b == LT or b == DQ
        or b == SQ
end

-- a byte that may start an XML name (ASCII letters, '_', ':', any non-ASCII byte)
local function name_start(b)
    return b ~= nil and ((b >= 65 and b <= 90) or (b >= 97 and b <= 122) or b == 95
        or b == COLON or b >= 128)
end

-- The name starting at i: its end (last byte) and the start of its local part (after the
-- last ':'); nil when no name starts at i.
local function name_at(s, i)
    if not name_start(byte(s, i)) then
        return nil
    end
    local j, loc = i, i
    while true do
        local b = byte(s, j + 1)
        if name_end(b) then
            return j, loc
        end
        j = j + 1
        if b == COLON then
            loc = j + 1
        end
    end
end

-- whether s[i..j] is exactly `word`
local function is(s, i, j, word)
    return j - i + 1 == #word and sub(s, i, j) == word
end

-- The attributes and end of a start tag whose name ends at i - 1: the position of its '>' and
-- whether it closes itself ("/>"); nil when the tag is not well-formed.
local function tag_end(s, i)
    local seen_space = false
    while true do
        local b = byte(s, i)
        if b == nil then
            return nil
        elseif space(b) then
            seen_space = true
            i = i + 1
        elseif b == GT then
            return i, false
        elseif b == SLASH then
            if byte(s, i + 1) ~= GT then
                return nil
            end
            return i + 1, true
        else
            -- an attribute: name, '=', a quoted value (which may hold '>' and '/')
            if not seen_space then
                return nil
            end
            local ne = name_at(s, i)
            if not ne then
                return nil
            end
            i = ne + 1
            while space(byte(s, i)) do
                i = i + 1
            end
            if byte(s, i) ~= EQ then
                return nil
            end
            i = i + 1
            while space(byte(s, i)) do
                i = i + 1
            end
            local q = byte(s, i)
            if q ~= DQ and q ~= SQ then
                return nil
            end
            local close = find(s, q == DQ and '"' or "'", i + 1, true)
            if not close or find(sub(s, i + 1, close - 1), "<", 1, true) then
                return nil
            end
            i = close + 1
            seen_space = false
        end
    end
end

--- The number of <Object> children of the <Delete> root of XML document `body`, or nil,
-- "malformed_xml" when it is not a well-formed document with that root (end tags that do not
-- match, text or a second element outside the root, a DTD, nesting deeper than 32) or names
-- more than 1000 keys.
function _M.count(body)
    if type(body) ~= "string" then
        return nil, MALFORMED
    end
    local n = #body
    local pos = 1
    if sub(body, 1, 3) == "\239\187\191" then     -- UTF-8 byte order mark
        pos = 4
    end
    local stack, depth = {}, 0
    local roots, count = 0, 0
    while pos <= n do
        local lt = find(body, "<", pos, true)
        if depth == 0 then
            -- outside the root: whitespace alone
            local text = sub(body, pos, (lt or n + 1) - 1)
            if find(text, "%S") then
                return nil, MALFORMED
            end
        end
        if not lt then
            break
        end
        local b = byte(body, lt + 1)
        if b == QMARK then                          -- processing instruction / declaration
            local e = find(body, "?>", lt + 2, true)
            if not e then
                return nil, MALFORMED
            end
            pos = e + 2
        elseif b == BANG then
            if sub(body, lt, lt + 3) == "<!--" then
                local e = find(body, "-->", lt + 4, true)
                if not e then
                    return nil, MALFORMED
                end
                pos = e + 3
            elseif sub(body, lt, lt + 8) == "<![CDATA[" and depth > 0 then
                local e = find(body, "]]>", lt + 9, true)
                if not e then
                    return nil, MALFORMED
                end
                pos = e + 3
            else
                return nil, MALFORMED               -- DOCTYPE and other declarations
            end
        elseif b == SLASH then                      -- end tag
            local ne = name_at(body, lt + 2)
            if not ne or depth == 0 then
                return nil, MALFORMED
            end
            local e = ne + 1
            while space(byte(body, e)) do
                e = e + 1
            end
            if byte(body, e) ~= GT or not is(body, lt + 2, ne, stack[depth]) then
                return nil, MALFORMED
            end
            stack[depth] = nil
            depth = depth - 1
            pos = e + 1
        else                                        -- start tag
            local ne, loc = name_at(body, lt + 1)
            if not ne then
                return nil, MALFORMED
            end
            local e, empty = tag_end(body, ne + 1)
            if not e then
                return nil, MALFORMED
            end
            if depth == 0 then
                roots = roots + 1
                if roots > 1 or not is(body, loc, ne, "Delete") then
                    return nil, MALFORMED
                end
            elseif depth == 1 and is(body, loc, ne, "Object") then
                count = count + 1
                if count > MAX_KEYS then
                    return nil, MALFORMED
                end
            end
            if not empty then
                if depth >= MAX_DEPTH then
                    return nil, MALFORMED
                end
                depth = depth + 1
                stack[depth] = sub(body, lt + 1, ne)
            end
            pos = e + 1
        end
    end
    if depth ~= 0 or roots ~= 1 then
        return nil, MALFORMED
    end
    return count
end

--- The payload of an aws-chunked body ("<hex size>[;chunk-signature=...]\r\n<data>\r\n" ...
-- up to the chunk of size 0 and its trailers), or nil, "malformed_xml" when it is not one.
function _M.dechunk(body)
    local parts, np = {}, 0
    local pos, n = 1, #body
    while true do
        local eol = find(body, "\r\n", pos, true)
        if not eol then
            return nil, MALFORMED
        end
        local semi = find(body, ";", pos, true)
        local hex = sub(body, pos, ((semi and semi < eol) and semi or eol) - 1)
        local size = #hex > 0 and #hex <= 8 and not find(hex, "[^%x]") and tonumber(hex, 16)
        if not size then
            return nil, MALFORMED
        end
        if size == 0 then
            return table.concat(parts)
        end
        local s = eol + 2
        local e = s + size - 1
        if e + 2 > n or sub(body, e + 1, e + 2) ~= "\r\n" then
            return nil, MALFORMED
        end
        np = np + 1
        parts[np] = sub(body, s, e)
        pos = e + 3
    end
end

-- whether a request's body is sent aws-chunked (all: its headers, tollgate.request.headers.all)
local function aws_chunked(all)
    local sha = all["x-amz-content-sha256"]
    if type(sha) == "string" and sub(sha, 1, 10) == "STREAMING-" then
        return true
    end
    local ce = all["content-encoding"]
    return type(ce) == "string" and find(lower(ce), "aws-chunked", 1, true) ~= nil
end

--- The keys of the current DeleteObjects request (all: its headers), reading at most `max`
-- bytes of its body: the count (at least 1: a body without keys costs as one), or nil, reason
-- (message_too_long before the body is read when Content-Length or
-- x-amz-decoded-content-length announces more, or once more was read; malformed_xml).
function _M.read(all, max)
    local len = tonumber(all["content-length"])
    local dlen = tonumber(all["x-amz-decoded-content-length"])
    if (len and len > max) or (dlen and dlen > max) then
        return nil, TOO_LONG
    end
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if not body then
        local path = ngx.req.get_body_file()
        if not path then
            return 1                                -- no body: the backend refuses it
        end
        local f = io.open(path, "rb")
        if not f then
            return nil, TOO_LONG
        end
        body = f:read(max + 1) or ""
        f:close()
    end
    if #body > max then
        return nil, TOO_LONG
    end
    if aws_chunked(all) then
        local err
        body, err = _M.dechunk(body)
        if not body then
            return nil, err
        end
    end
    local count, err = _M.count(body)
    if not count then
        return nil, err
    end
    return count > 0 and count or 1
end

return _M
