-- The access key id of an S3 request's credentials, read as S3 servers read them, pure Lua (no
-- ngx): SigV4/SigV4a and SigV2 Authorization headers, presigned V4/V2 query strings and browser
-- POST form fields, and the query-string helpers they share with tollgate.s3 (which re-exports
-- this module's functions). tollgate reads credentials to know whom to charge.
--
-- One reading, the backend's: query parameter names and values are percent-decoded ('+' is a
-- space) as Go's url.ParseQuery, Ceph RGW and AWS decode them, so `X-Amz-%43redential` is
-- `X-Amz-Credential`. Backends choose between credentials in different orders (MinIO prefers
-- the header, then V2 over V4 presigned parameters; others look at X-Amz-Algorithm; a repeated
-- parameter is the first value to Go and the last to others), so a request whose credentials
-- could be read as two different key ids is not read at all: each reader returns an error
-- reason (`ambiguous_credentials`, `malformed_credentials`, `post_fields_too_large`) that the
-- gateway answers with a 400 in S3's dialect before anything is charged. So is a parameter or
-- field name that is a credential's name in another case or punctuation
-- (`x-amz-credential`, `X_Amz_Credential`), or one that follows a ';' (a separator to older
-- parsers).
local find = string.find
local sub = string.sub
local byte = string.byte
local lower = string.lower
local gsub = string.gsub
local char = string.char
local type = type
local tonumber = tonumber

local _M = {}

local AMP = byte("&")
local EQ = byte("=")
local SLASH = byte("/")
local COLON = byte(":")
local COMMA = byte(",")
local PCT = byte("%")
local PLUS = byte("+")
local SPACE = byte(" ")
local TAB = byte("\t")

-- error reasons (tollgate.identity.REFUSALS answers them)
local AMBIGUOUS = "ambiguous_credentials"
local MALFORMED = "malformed_credentials"
local PRE_DATA = "post_fields_too_large"
_M.AMBIGUOUS, _M.MALFORMED, _M.PRE_DATA = AMBIGUOUS, MALFORMED, PRE_DATA

--- true for an access key id tollgate accepts: AWS-style (AKIA..., 16-128 alphanumerics) and
-- MinIO/Ceph-style keys (3-128 printable ASCII characters without '/', ',' or whitespace); the
-- first form is a case of the second. A byte loop, not a pattern: LuaJIT compiles it (a
-- pattern match would leave the request path's trace to the interpreter).
function _M.valid_key(k)
    if type(k) ~= "string" then
        return false
    end
    local n = #k
    if n < 3 or n > 128 then
        return false
    end
    for i = 1, n do
        local b = byte(k, i)
        if b < 33 or b > 126 or b == SLASH or b == COMMA then
            return false
        end
    end
    return true
end

local function hexval(c)
    return tonumber(c, 16)
end

-- the value of a hex digit's byte, nil for any other byte
local function nibble(b)
    if b == nil then
        return nil
    end
    if b >= 48 and b <= 57 then
        return b - 48
    elseif b >= 65 and b <= 70 then
        return b - 55
    elseif b >= 97 and b <= 102 then
        return b - 87
    end
    return nil
end

--- Percent-decoding of a query value ('+' is a space, as in forms).
local function unescape(s)
    if not find(s, "%", 1, true) and not find(s, "+", 1, true) then
        return s
    end
    s = gsub(s, "+", " ")
    return (gsub(s, "%%(%x%x)", function(h) return char(hexval(h)) end))
end
_M.unescape = unescape

-- The names of credentials: exact, and "loose" (lower-case letters and digits alone).
local V4Q, V4Q_LOOSE = "X-Amz-Credential", "xamzcredential"
local V2Q, V2Q_LOOSE = "AWSAccessKeyId", "awsaccesskeyid"
local HDR, HDR_LOOSE = "Credential", "credential"

-- What s[i..j] is, decoded when `decode` (%XX, '+' a space): 1 the name `exact`, 2 a near miss
-- (the same letters and digits as `loose` in other case or punctuation), nil anything else.
-- A byte loop without garbage that gives up at the first byte that fits neither.
local function name_is(s, i, j, exact, loose, decode)
    local ne, nl = 0, 0             -- bytes matched so far (-1: no longer matching)
    local el, ll = #exact, #loose
    while i <= j do
        local b = byte(s, i)
        if decode then
            if b == PCT then
                local h, l = nibble(byte(s, i + 1)), nibble(byte(s, i + 2))
                if h and l and i + 2 <= j then
                    b = h * 16 + l
                    i = i + 2
                end
            elseif b == PLUS then
                b = SPACE
            end
        end
        i = i + 1
        if ne >= 0 then
            if ne < el and byte(exact, ne + 1) == b then
                ne = ne + 1
            else
                ne = -1
            end
        end
        if b >= 65 and b <= 90 then
            b = b + 32
        end
        if (b >= 97 and b <= 122) or (b >= 48 and b <= 57) then
            if nl < ll and byte(loose, nl + 1) == b then
                nl = nl + 1
            else
                return ne == el and 1 or nil
            end
        end
    end
    if ne == el then
        return 1
    end
    if nl == ll then
        return 2
    end
    return nil
end

-- The credential a query parameter name q[i..j] is: "v4" (X-Amz-Credential), "v2"
-- (AWSAccessKeyId), false for a near miss of either, nil for any other name.
local function query_name(q, i, j)
    local k = name_is(q, i, j, V4Q, V4Q_LOOSE, true)
    if k then
        return k == 1 and "v4" or false
    end
    k = name_is(q, i, j, V2Q, V2Q_LOOSE, true)
    if k then
        return k == 1 and "v2" or false
    end
    return nil
end

--- The raw value of query parameter `name` (nil when absent, "" when it has no value).
local function arg(q, name)
    if not q or q == "" then
        return nil
    end
    local n = #name
    local init = 1
    while true do
        local s, e = find(q, name, init, true)
        if not s then
            return nil
        end
        if s == 1 or byte(q, s - 1) == AMP then
            local after = byte(q, e + 1)
            if after == nil or after == AMP then
                return ""
            end
            if after == EQ then
                local stop = find(q, "&", e + 2, true)
                return sub(q, e + 2, (stop or #q + 1) - 1)
            end
        end
        init = s + n
    end
end
_M.arg = arg

-- The access key id of a decoded Credential value "AKID/date/region/s3/aws4_request".
local function credential_key(v)
    local slash = find(v, "/", 1, true)
    if not slash then
        return nil
    end
    return sub(v, 1, slash - 1)
end

-- Merge credential `k` (of form `how`) into the one found so far (akid, ahow): the pair to
-- keep, or nil, nil, err when they name different keys.
local function merge(akid, ahow, k, how)
    if akid == nil then
        return k, how
    end
    if k ~= akid then
        return nil, nil, AMBIGUOUS
    end
    return akid, ahow
end

--- The access key id of an Authorization header, its form ("v4", "v2"); nil when the header
-- carries no S3 credentials (not "AWS..."); nil, nil, reason for an S3 header that cannot be
-- read as one credential (a V4 header without exactly one Credential field, a V2 header without
-- a ':'). Plain finds and byte loops only (see valid_key).
--   SigV4:  AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request, ...
--   SigV4a: AWS4-ECDSA-P256-SHA256 Credential=AKID/20130524/s3/aws4_request, ...
--   SigV2:  AWS AKID:signature
function _M.from_authorization(h)
    if type(h) ~= "string" or byte(h, 1) ~= 65 or byte(h, 2) ~= 87 or byte(h, 3) ~= 83 then
        return nil                                  -- not "AWS..."
    end
    local b4 = byte(h, 4)
    if b4 == 52 and byte(h, 5) == 45 then           -- "AWS4-"
        local sp = find(h, " ", 6, true)
        if not sp then
            return nil, nil, MALFORMED
        end
        -- the form every client sends: "Credential=" first, no other, and every other field's
        -- name starting with 'S' (SignedHeaders, Signature): plain finds, no loop over names
        local cs = sp + 1
        if find(h, "Credential=", cs, true) == cs then
            local slash = find(h, "/", cs + 11, true)
            local comma = find(h, ",", cs + 11, true)
            if slash and (not comma or slash < comma)
                    and not find(h, "Credential=", slash, true) then
                local p = comma
                while p do
                    local q = p + 1
                    local b = byte(h, q)
                    while b == SPACE or b == TAB do
                        q = q + 1
                        b = byte(h, q)
                    end
                    if b ~= 83 and b ~= 115 then        -- 'S', 's'
                        break
                    end
                    p = find(h, ",", q, true)
                end
                if not p then
                    return sub(h, cs + 11, slash - 1), "v4"
                end
            end
        end
        -- any other form: the fields, comma-separated: exactly one named Credential, no near miss
        local n = #h
        local pos = sp + 1
        local akid
        while pos <= n do
            local comma = find(h, ",", pos, true)
            local fe = comma and comma - 1 or n
            local b = byte(h, pos)
            while pos <= fe and (b == SPACE or b == TAB) do
                pos = pos + 1
                b = byte(h, pos)
            end
            local eq = find(h, "=", pos, true)
            local ne = (eq and eq <= fe) and eq - 1 or fe
            local k = name_is(h, pos, ne, HDR, HDR_LOOSE, false)
            if k == 2 or (k == 1 and akid) then
                return nil, nil, AMBIGUOUS
            end
            if k == 1 then
                local slash = find(h, "/", ne + 2, true)
                if ne == fe or not slash or slash > fe then
                    return nil, nil, MALFORMED
                end
                akid = sub(h, ne + 2, slash - 1)
            end
            pos = fe + 2
        end
        if not akid then
            return nil, nil, MALFORMED
        end
        -- a parser that looks for "Credential=" anywhere must find the same one
        local s = find(h, "Credential=", sp, true)
        if s and find(h, "Credential=", s + 11, true) then
            return nil, nil, AMBIGUOUS
        end
        return akid, "v4"
    end
    if b4 == 32 then                                -- "AWS "
        -- the signature (base64) has no ':', the key id is everything before the last one
        for i = #h, 5, -1 do
            if byte(h, i) == COLON then
                return sub(h, 5, i - 1), "v2"
            end
        end
        return nil, nil, MALFORMED
    end
    return nil
end

-- Whether a ';' in q[i..j] is followed by a credential's name (or a near miss): parsers that
-- take ';' as a separator (Go before 1.17, Python before 3.9.2) would read a parameter there.
local function after_semicolon(q, i, j)
    while true do
        local semi = find(q, ";", i, true)
        if not semi or semi > j then
            return false
        end
        local stop = j
        local eq = find(q, "=", semi + 1, true)
        if eq and eq <= stop then
            stop = eq - 1
        end
        local semi2 = find(q, ";", semi + 1, true)
        if semi2 and semi2 <= stop then
            stop = semi2 - 1
        end
        if query_name(q, semi + 1, stop) ~= nil then
            return true
        end
        i = semi + 1
    end
end

--- The access key id of a presigned URL's query (raw, as sent) and its form ("presigned-v4"
-- from X-Amz-Credential, "presigned-v2" from AWSAccessKeyId); nil without either; nil, nil,
-- reason when the query's credentials could be read two ways (two key ids, a near-miss name,
-- a credential after a ';') or a Credential has no '/'.
local function from_query(q)
    if not q or q == "" then
        return nil
    end
    local akid, how, err
    local n = #q
    local pos = 1
    local semis = find(q, ";", 1, true) ~= nil
    while pos <= n do
        local amp = find(q, "&", pos, true)
        local stop = amp and amp - 1 or n
        if stop >= pos then
            local eq = find(q, "=", pos, true)
            if eq and eq > stop then
                eq = nil
            end
            local kind = query_name(q, pos, eq and eq - 1 or stop)
            if kind == false or (semis and after_semicolon(q, pos, stop)) then
                return nil, nil, AMBIGUOUS
            end
            if kind then
                local v = eq and unescape(sub(q, eq + 1, stop)) or ""
                local k = v
                if kind == "v4" then
                    k = credential_key(v)
                    if not k then
                        return nil, nil, MALFORMED
                    end
                end
                akid, how, err = merge(akid, how, k, kind == "v4" and "presigned-v4"
                    or "presigned-v2")
                if err then
                    return nil, nil, err
                end
            end
        end
        pos = stop + 2
    end
    return akid, how
end
_M.from_query = from_query

--- The boundary of a multipart/form-data Content-Type, nil for any other type.
function _M.form_boundary(ct)
    if type(ct) ~= "string" or lower(sub(ct, 1, 19)) ~= "multipart/form-data" then
        return nil
    end
    local _, e = find(lower(ct), "boundary=", 20, true)
    if not e then
        return nil
    end
    local b = sub(ct, e + 1)
    if byte(b, 1) == 34 then            -- quoted
        local q = find(b, '"', 2, true)
        b = q and sub(b, 2, q - 1) or nil
    else
        local stop = find(b, "[;%s]")
        if stop then
            b = sub(b, 1, stop - 1)
        end
    end
    if not b or b == "" or #b > 70 then
        return nil
    end
    return b
end

-- The field name of a part's headers (lower case), from name="..." or name=token (never the
-- name inside filename="...").
local function part_name(head)
    local name = head:match('[;%s]name%s*=%s*"([^"]*)"')
    if not name then
        name = head:match("[;%s]name%s*=%s*([^;%s]+)")
    end
    return name
end

--- The access key id of a browser POST upload's form fields (X-Amz-Credential for SigV4,
-- AWSAccessKeyId for SigV2; names in any case, as S3 reads them) found in `body`, the first
-- bytes of a multipart/form-data body with `boundary`, and its form ("post-v4", "post-v2").
-- S3 puts the file last and ignores the fields after it. `truncated`: body is only the start of
-- the form. Returns nil without credentials; nil, nil, reason for two different key ids, a
-- near-miss name, a Credential without '/', or fields before the file longer than `body`
-- (post_fields_too_large: S3's MaxPostPreDataLengthExceeded).
function _M.from_form(body, boundary, truncated)
    if type(body) ~= "string" or not boundary then
        return nil
    end
    local delim = "--" .. boundary
    local pos = 1
    local akid, how, err
    while true do
        local s, e = find(body, delim, pos, true)
        if not s then
            break
        end
        local hend = find(body, "\r\n\r\n", e, true)
        if not hend then
            break
        end
        local name = part_name(lower(sub(body, e + 1, hend)))
        if name == "file" then
            return akid, how            -- fields after the file are not S3's
        end
        local vend = find(body, "\r\n" .. delim, hend + 4, true)
        if not vend then
            break
        end
        if name then
            local kv4 = name_is(name, 1, #name, "x-amz-credential", V4Q_LOOSE, false)
            local kv2 = name_is(name, 1, #name, "awsaccesskeyid", V2Q_LOOSE, false)
            if kv4 == 2 or kv2 == 2 then
                return nil, nil, AMBIGUOUS
            end
            local v = sub(body, hend + 4, vend - 1)
            if kv4 == 1 then
                local k = credential_key(v)
                if not k then
                    return nil, nil, MALFORMED
                end
                akid, how, err = merge(akid, how, k, "post-v4")
            elseif kv2 == 1 then
                akid, how, err = merge(akid, how, v, "post-v2")
            end
            if err then
                return nil, nil, err
            end
        end
        pos = vend + 2
    end
    if truncated then
        return nil, nil, PRE_DATA
    end
    return akid, how
end

return _M
