-- AWS Signature Version 2 as S3 checks it, pure LuaJIT (no ngx): the string to sign of an
-- `Authorization: AWS AKID:signature` request and of a presigned URL (AWSAccessKeyId, Expires,
-- Signature), and its signature: base64 of HMAC-SHA1 under the secret.
local crypto = require("tollgate.s3.sigcrypto")

local find = string.find
local sub = string.sub
local lower = string.lower
local gsub = string.gsub
local concat = table.concat
local sort = table.sort
local type = type

local _M = {}

-- the sub-resources and response overrides that belong to the canonicalized resource
local SUBRESOURCES = {}
for _, k in ipairs({ "acl", "cors", "delete", "encryption", "legal-hold", "lifecycle",
    "location", "logging", "notification", "object-lock", "partNumber", "policy",
    "requestPayment", "response-cache-control", "response-content-disposition",
    "response-content-encoding", "response-content-language", "response-content-type",
    "response-expires", "restore", "retention", "select", "select-type", "tagging",
    "torrent", "uploadId", "uploads", "versionId", "versioning", "versions", "website",
    "replication", "accelerate", "analytics", "inventory", "metrics", "ownershipControls",
    "publicAccessBlock", "intelligent-tiering", "attributes" }) do
    SUBRESOURCES[k] = true
end

--- The fields of a V2 Authorization header "AWS AKID:signature": akid, signature; or nil.
function _M.parse_header(h)
    if type(h) ~= "string" or sub(h, 1, 4) ~= "AWS " then
        return nil
    end
    local colon
    local pos = 5
    while true do                       -- the last ':' (Ceph keys may hold one)
        local c = find(h, ":", pos, true)
        if not c then
            break
        end
        colon, pos = c, c + 1
    end
    if not colon or colon == 5 or colon == #h then
        return nil
    end
    return sub(h, 5, colon - 1), sub(h, colon + 1)
end

local function trim(v)
    return (gsub(gsub(v, "^[ \t]+", ""), "[ \t]+$", ""))
end

local function value(v)
    if type(v) == "table" then
        local vs = {}
        for i = 1, #v do
            vs[i] = trim(v[i])
        end
        return concat(vs, ",")
    end
    return v and trim(v) or ""
end

--- The string to sign: method, the headers table (lower-case names), the raw path (as sent,
--- without the query), the decoded query parameters ({name, value} each), the bucket of a
--- virtual-hosted request (nil for path style), and `date`: the Date line (the Date header,
--- "" when x-amz-date is sent; the Expires value of a presigned URL).
function _M.string_to_sign(method, headers, path, params, vbucket, date)
    local amz, n = {}, 0
    for name, v in pairs(headers) do
        if type(name) == "string" and sub(name, 1, 6) == "x-amz-" then
            n = n + 1
            amz[n] = lower(name) .. ":" .. value(v)
        end
    end
    sort(amz)
    local res = path
    if res == nil or res == "" then
        res = "/"
    end
    if vbucket then
        res = "/" .. vbucket .. res
    end
    local subs, m = {}, 0
    for i = 1, #params do
        local p = params[i]
        if SUBRESOURCES[p[1]] then
            m = m + 1
            subs[m] = p[2] ~= "" and (p[1] .. "=" .. p[2]) or p[1]
        end
    end
    if m > 0 then
        sort(subs)
        res = res .. "?" .. concat(subs, "&")
    end
    local out = { method, value(headers["content-md5"]), value(headers["content-type"]), date }
    for i = 1, n do
        out[4 + i] = amz[i]
    end
    out[5 + n] = res
    return concat(out, "\n")
end

--- The signature (base64) of a string to sign under secret.
function _M.signature(secret, sts)
    return crypto.b64(crypto.hmac_sha1(secret, sts))
end

return _M
