-- AWS Signature Version 4 as S3 checks it, pure LuaJIT (no ngx): the Authorization header and
-- the presigned query parsed, the canonical request (the raw path URI-encoded once — S3 neither
-- double-encodes nor normalizes —, the query decoded and re-encoded, sorted by name then value,
-- the signed headers trimmed, the payload hash as x-amz-content-sha256 declares it), the string
-- to sign and the signature from a signing key the caller caches per (key, day, region,
-- service). A streaming upload (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) signs that literal as its
-- payload hash: its seed signature is the header signature; its chunk signatures need the body
-- and are left to the backend.
local crypto = require("tollgate.s3.sigcrypto")

local byte = string.byte
local char = string.char
local find = string.find
local sub = string.sub
local lower = string.lower
local gsub = string.gsub
local format = string.format
local concat = table.concat
local sort = table.sort
local type = type
local tonumber = tonumber
local hmac = crypto.hmac_sha256
local sha256 = crypto.sha256
local hex = crypto.hex

local _M = {}

_M.ALGORITHM = "AWS4-HMAC-SHA256"
_M.EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
_M.UNSIGNED = "UNSIGNED-PAYLOAD"
_M.MAX_EXPIRES = 604800            -- seven days: S3's limit of X-Amz-Expires

-- bytes left alone by URI encoding: A-Z a-z 0-9 - . _ ~
local UNRESERVED = {}
for b = 0, 255 do
    UNRESERVED[b] = (b >= 65 and b <= 90) or (b >= 97 and b <= 122) or (b >= 48 and b <= 57)
        or b == 45 or b == 46 or b == 95 or b == 126
end
local ENC = {}
for b = 0, 255 do
    ENC[b] = format("%%%02X", b)
end

local function hexval(h)
    return char(tonumber(h, 16))
end

--- Percent-decoding (plus_space: '+' is a space, as in a query).
local function decode(s, plus_space)
    if plus_space and find(s, "+", 1, true) then
        s = gsub(s, "+", " ")
    end
    if not find(s, "%", 1, true) then
        return s
    end
    return (gsub(s, "%%(%x%x)", hexval))
end
_M.decode = decode

--- AWS URI encoding of s: every byte but the unreserved ones as %XX (and '/' kept when
--- keep_slash).
local function encode(s, keep_slash)
    local n = #s
    local clean = true
    for i = 1, n do
        local b = byte(s, i)
        if not UNRESERVED[b] and not (keep_slash and b == 47) then
            clean = false
            break
        end
    end
    if clean then
        return s
    end
    local out = {}
    for i = 1, n do
        local b = byte(s, i)
        if UNRESERVED[b] or (keep_slash and b == 47) then
            out[i] = char(b)
        else
            out[i] = ENC[b]
        end
    end
    return concat(out)
end
_M.encode = encode

--- The canonical URI of a raw request path (without the query): decoded once and encoded once,
--- slashes kept, nothing normalized.
function _M.canonical_uri(path)
    if path == nil or path == "" then
        return "/"
    end
    if byte(path, 1) ~= 47 then
        path = "/" .. path
    end
    return encode(decode(path, false), true)
end

local function by_name_value(a, b)
    if a[1] == b[1] then
        return a[2] < b[2]
    end
    return a[1] < b[1]
end

--- The parameters of a raw query decoded: an array of {name, value} in the order sent (empty
--- pieces skipped), as S3 servers read them.
function _M.params(q)
    local out, n = {}, 0
    if q == nil or q == "" then
        return out
    end
    local pos, len = 1, #q
    while pos <= len do
        local amp = find(q, "&", pos, true) or len + 1
        if amp > pos then
            local piece = sub(q, pos, amp - 1)
            local eq = find(piece, "=", 1, true)
            n = n + 1
            if eq then
                out[n] = { decode(sub(piece, 1, eq - 1), true), decode(sub(piece, eq + 1), true) }
            else
                out[n] = { decode(piece, true), "" }
            end
        end
        pos = amp + 1
    end
    return out
end

--- The canonical query string of decoded parameters ps (from params()), without the parameter
--- named `skip` (X-Amz-Signature of a presigned URL).
function _M.canonical_query(ps, skip)
    local n = #ps
    if n == 0 then
        return ""
    end
    local enc, m = {}, 0
    for i = 1, n do
        local p = ps[i]
        if p[1] ~= skip then
            m = m + 1
            enc[m] = { encode(p[1], false), encode(p[2], false) }
        end
    end
    sort(enc, by_name_value)
    local out = {}
    for i = 1, m do
        out[i] = enc[i][1] .. "=" .. enc[i][2]
    end
    return concat(out, "&")
end

-- a header value trimmed, runs of spaces and tabs as one space (patterns only when needed: the
-- common value has none, and a byte scan keeps the request path compiled)
local function trimall(v)
    local n = #v
    if n == 0 then
        return v
    end
    local b1, bn = byte(v, 1), byte(v, n)
    local dirty = b1 == 32 or b1 == 9 or bn == 32 or bn == 9
    if not dirty then
        local prev = 0
        for i = 2, n - 1 do
            local b = byte(v, i)
            if b == 9 or (b == 32 and prev == 32) then
                dirty = true
                break
            end
            prev = b
        end
    end
    if not dirty then
        return v
    end
    v = gsub(v, "^[ \t]+", "")
    v = gsub(v, "[ \t]+$", "")
    return (gsub(v, "[ \t]+", " "))
end
_M.trimall = trimall

--- The canonical headers of `signed` (the SignedHeaders value, names lower-case and sorted,
--- ';'-separated) from headers (lower-case name -> value, or the list of a repeated
--- header's values): "name:value\n" each. Returns nil, name when `signed` is not sorted, lower
--- case and unique.
function _M.canonical_headers(signed, headers)
    local out, n = {}, 0
    local pos, len, prev = 1, #signed, nil
    while pos <= len do
        local semi = find(signed, ";", pos, true) or len + 1
        local name = sub(signed, pos, semi - 1)
        if name == "" or name ~= lower(name) or (prev and name <= prev) then
            return nil, name
        end
        prev = name
        local v = headers[name]
        if type(v) == "table" then
            local vs = {}
            for i = 1, #v do
                vs[i] = trimall(v[i])
            end
            v = concat(vs, ",")
        elseif v == nil then
            v = ""
        else
            v = trimall(v)
        end
        n = n + 1
        out[n] = name .. ":" .. v .. "\n"
        pos = semi + 1
    end
    return concat(out)
end

--- The canonical request.
function _M.canonical_request(method, curi, cquery, cheaders, signed, payload_hash)
    return method .. "\n" .. curi .. "\n" .. cquery .. "\n" .. cheaders .. "\n" .. signed .. "\n"
        .. payload_hash
end

--- The string to sign of a canonical request (amz_date: YYYYMMDDTHHMMSSZ; scope:
--- date/region/service/aws4_request).
function _M.string_to_sign(amz_date, scope, creq)
    return "AWS4-HMAC-SHA256\n" .. amz_date .. "\n" .. scope .. "\n" .. hex(sha256(creq))
end

--- The signing key of secret for (date YYYYMMDD, region, service): 32 raw bytes.
function _M.signing_key(secret, date, region, service)
    local k = hmac("AWS4" .. secret, date)
    k = hmac(k, region)
    k = hmac(k, service)
    return hmac(k, "aws4_request")
end

--- The signature (lower-case hex) of a string to sign under a signing key.
function _M.signature(skey, sts)
    return hex(hmac(skey, sts))
end

-- true when s[i..j] is 8 digits
local function digits8(s, i)
    for k = i, i + 7 do
        local b = byte(s, k)
        if not b or b < 48 or b > 57 then
            return false
        end
    end
    return true
end

-- The parts of a Credential value AKID/date/region/service/aws4_request, or nil (plain finds:
-- see tollgate.s3.credentials.valid_key).
local function credential(v)
    if type(v) ~= "string" then
        return nil
    end
    local s1 = find(v, "/", 1, true)
    local s2 = s1 and find(v, "/", s1 + 1, true)
    local s3 = s2 and find(v, "/", s2 + 1, true)
    local s4 = s3 and find(v, "/", s3 + 1, true)
    if not s4 or s1 == 1 or s2 ~= s1 + 9 or not digits8(v, s1 + 1) or s3 == s2 + 1
            or s4 == s3 + 1 or sub(v, s4 + 1) ~= "aws4_request" then
        return nil
    end
    return { akid = sub(v, 1, s1 - 1), date = sub(v, s1 + 1, s2 - 1),
             region = sub(v, s2 + 1, s3 - 1), service = sub(v, s3 + 1, s4 - 1),
             scope = sub(v, s1 + 1) }
end
_M.credential = credential

local function is_hex64(s)
    if #s ~= 64 then
        return false
    end
    for i = 1, 64 do
        local b = byte(s, i)
        if not ((b >= 48 and b <= 57) or (b >= 97 and b <= 102) or (b >= 65 and b <= 70)) then
            return false
        end
    end
    return true
end

--- The fields of a SigV4 Authorization header: {akid, date, region, service, scope, signed,
--- signature}; or nil, "malformed". Each of Credential, SignedHeaders and Signature once, no
--- other field.
--   AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request,
--       SignedHeaders=host;range;x-amz-date, Signature=fe5f80f7...
function _M.parse_header(h)
    if type(h) ~= "string" or sub(h, 1, 17) ~= "AWS4-HMAC-SHA256 " then
        return nil, "malformed"
    end
    local cred, signed, sig
    local pos, len = 18, #h
    while pos <= len do
        while byte(h, pos) == 32 do
            pos = pos + 1
        end
        local comma = find(h, ",", pos, true) or len + 1
        local e = comma - 1
        while e >= pos and byte(h, e) == 32 do
            e = e - 1
        end
        local eq = find(h, "=", pos, true)
        if not eq or eq > e then
            return nil, "malformed"
        end
        local k, v = sub(h, pos, eq - 1), sub(h, eq + 1, e)
        if k == "Credential" and not cred then
            cred = v
        elseif k == "SignedHeaders" and not signed then
            signed = v
        elseif k == "Signature" and not sig then
            sig = v
        else
            return nil, "malformed"
        end
        pos = comma + 1
    end
    local c = credential(cred)
    if not c or not signed or signed == "" or not sig or not is_hex64(sig) then
        return nil, "malformed"
    end
    c.signed, c.signature = signed, lower(sig)
    return c
end

-- days from 1970-01-01 to y-m-d (proleptic Gregorian)
local function days(y, m, d)
    if m <= 2 then
        y = y - 1
    end
    local era = (y >= 0 and y or y - 399) / 400
    era = era - era % 1
    local yoe = y - era * 400
    local mp = (m + 9) % 12
    local doy = (153 * mp + 2) / 5
    doy = doy - doy % 1 + d - 1
    local doe = yoe * 365 + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100 + doy
    return era * 146097 + doe - 719468
end

local function num(s, i, j)
    local n = 0
    for k = i, j do
        local b = byte(s, k)
        if not b or b < 48 or b > 57 then
            return nil
        end
        n = n * 10 + b - 48
    end
    return n
end

--- Seconds since the epoch of an ISO 8601 basic time (YYYYMMDDTHHMMSSZ), or nil.
function _M.parse_amz_date(s)
    if type(s) ~= "string" or #s ~= 16 or byte(s, 9) ~= 84 or byte(s, 16) ~= 90 then
        return nil
    end
    local y, mo, d = num(s, 1, 4), num(s, 5, 6), num(s, 7, 8)
    local h, mi, se = num(s, 10, 11), num(s, 12, 13), num(s, 14, 15)
    if not (y and mo and d and h and mi and se) or mo < 1 or mo > 12 or d < 1 or d > 31
            or h > 23 or mi > 59 or se > 60 then
        return nil
    end
    return days(y, mo, d) * 86400 + h * 3600 + mi * 60 + se
end

local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7, Aug = 8,
                 Sep = 9, Oct = 10, Nov = 11, Dec = 12 }

--- Seconds since the epoch of an HTTP date ("Tue, 27 Mar 2007 19:36:42 +0000" or "... GMT"),
--- or nil.
function _M.parse_http_date(s)
    if type(s) ~= "string" then
        return nil
    end
    local d, mon, y, h, mi, se, zone =
        s:match("^%a+, (%d%d?) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) (.+)$")
    local m = MONTHS[mon or ""]
    if not m or (zone ~= "GMT" and zone ~= "+0000" and zone ~= "UTC" and zone ~= "Z") then
        return nil
    end
    return days(tonumber(y), m, tonumber(d)) * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60
        + tonumber(se)
end

return _M
