-- The access key id of an S3 request's credentials, pure Lua (no ngx): SigV4/SigV4a and SigV2
-- Authorization headers, presigned V4/V2 query strings and browser POST form fields, and the
-- query-string helpers they share with tollgate.s3 (which re-exports this module's functions).
-- tollgate reads credentials to know whom to charge; it never checks a signature.
local find = string.find
local sub = string.sub
local byte = string.byte
local lower = string.lower
local gsub = string.gsub
local char = string.char
local type = type

local _M = {}

local AMP = byte("&")
local EQ = byte("=")
local SLASH = byte("/")
local COLON = byte(":")
local COMMA = byte(",")

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

--- Percent-decoding of a query value ('+' is a space, as in forms).
local function unescape(s)
    if not find(s, "%", 1, true) and not find(s, "+", 1, true) then
        return s
    end
    s = gsub(s, "+", " ")
    return (gsub(s, "%%(%x%x)", function(h) return char(hexval(h)) end))
end
_M.unescape = unescape

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

-- The access key id of a Credential value "AKID/date/region/s3/aws4_request" (decoded).
local function credential_key(v)
    local slash = find(v, "/", 1, true)
    if not slash then
        return nil
    end
    return sub(v, 1, slash - 1)
end

--- The access key id of an Authorization header, the form ("v4", "v2") and nil; or nil when
-- the header carries no S3 credentials (plain finds only: see valid_key).
--   SigV4:  AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request, ...
--   SigV4a: AWS4-ECDSA-P256-SHA256 Credential=AKID/20130524/s3/aws4_request, ...
--   SigV2:  AWS AKID:signature
function _M.from_authorization(h)
    if type(h) ~= "string" or byte(h, 1) ~= 65 or byte(h, 2) ~= 87 or byte(h, 3) ~= 83 then
        return nil                                  -- not "AWS..."
    end
    local b4 = byte(h, 4)
    if b4 == 52 and byte(h, 5) == 45 then           -- "AWS4-"
        local _, e = find(h, "Credential=", 6, true)
        if not e then
            return nil
        end
        local slash = find(h, "/", e + 1, true)
        if not slash then
            return nil
        end
        return sub(h, e + 1, slash - 1), "v4"
    end
    if b4 == 32 then                                -- "AWS "
        -- the signature (base64) has no ':', the key id is everything before the last one
        for i = #h, 5, -1 do
            if byte(h, i) == COLON then
                return sub(h, 5, i - 1), "v2"
            end
        end
    end
    return nil
end

--- The access key id of a presigned URL's query ("v4" X-Amz-Credential, "v2" AWSAccessKeyId).
function _M.from_query(q)
    if not q or q == "" then
        return nil
    end
    local v = arg(q, "X-Amz-Credential")
    if v then
        local cut = find(v, "%2F", 1, true) or find(v, "%2f", 1, true) or find(v, "/", 1, true)
        if not cut then
            return nil
        end
        return unescape(sub(v, 1, cut - 1)), "presigned-v4"
    end
    v = arg(q, "AWSAccessKeyId")
    if v then
        return unescape(v), "presigned-v2"
    end
    return nil
end

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

--- The access key id of a browser POST upload's form fields (X-Amz-Credential for SigV4,
-- AWSAccessKeyId for SigV2) found in `body`, the first bytes of a multipart/form-data body with
-- `boundary`. S3 puts the file last, so the fields come first.
function _M.from_form(body, boundary)
    if type(body) ~= "string" or not boundary then
        return nil
    end
    local delim = "--" .. boundary
    local pos = 1
    while true do
        local s, e = find(body, delim, pos, true)
        if not s then
            return nil
        end
        local hend = find(body, "\r\n\r\n", e, true)
        if not hend then
            return nil
        end
        local head = lower(sub(body, e + 1, hend))
        local name = head:match('name="([^"]*)"')
        local vend = find(body, "\r\n" .. delim, hend + 4, true)
        if name == "file" or not vend then
            return nil                  -- fields after the file are ignored by S3
        end
        if name == "x-amz-credential" then
            return credential_key(sub(body, hend + 4, vend - 1)), "post-v4"
        elseif name == "awsaccesskeyid" then
            return sub(body, hend + 4, vend - 1), "post-v2"
        end
        pos = vend + 2
    end
end

return _M
