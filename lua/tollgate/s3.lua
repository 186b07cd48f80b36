-- S3 request parsing, pure Lua (no ngx): the access key id of a request's credentials, the
-- bucket of either addressing style, the S3 operation and the S3 XML error body (the key count
-- of a DeleteObjects body is tollgate.s3.delete's). tollgate reads credentials to know whom to
-- charge; it never checks a signature (the backend does).
local credentials = require("tollgate.s3.credentials")

local find = string.find
local sub = string.sub
local byte = string.byte
local lower = string.lower
local gsub = string.gsub
local type = type

local _M = {}

-- the credential functions (tollgate.s3.credentials)
for name, fn in pairs(credentials) do
    _M[name] = fn
end
local arg = credentials.arg

local SLASH = byte("/")
local QMARK = byte("?")
local tonumber = tonumber
local char = string.char

--- The path of a raw request target ($request_uri) as S3 servers read it: everything before the
-- "?", undecoded — no dot-segment removal, no merging of "//", "%2F" still encoded (the key is
-- decoded from it by the backend, after the bucket is split off). An absolute-form target
-- ("http://host/path") gives its path. has_query false (the request's query string is empty)
-- spares the search for the "?".
function _M.raw_path(target, has_query)
    if type(target) ~= "string" or target == "" then
        return "/"
    end
    local path = target
    if has_query == false then      -- no query string: a "?" can only be the last character
        if byte(target, -1) == QMARK then
            path = sub(target, 1, -2)
        end
    else
        local q = find(target, "?", 1, true)
        if q then
            path = sub(target, 1, q - 1)
        end
    end
    if byte(path, 1) ~= SLASH then
        local scheme = find(path, "://", 1, true)
        if scheme then
            local slash = find(path, "/", scheme + 3, true)
            path = slash and sub(path, slash) or "/"
        end
    end
    return path
end

local function hexchar(h)
    return char(tonumber(h, 16))
end

--- %XX-decode s (pure Lua, for the few names that carry a "%").
local function unescape(s)
    if not find(s, "%", 1, true) then
        return s
    end
    return (gsub(s, "%%(%x%x)", hexchar))
end
_M.unescape = unescape

--- The domain a Host header's bucket is relative to. domains: array of lower-case domains.
-- Returns the bucket of a virtual-hosted request ("bkt" of "bkt.s3.localhost:8080"), or nil
-- for a path-style one.
function _M.vhost_bucket(host, domains)
    if type(host) ~= "string" or not domains or not domains[1] then
        return nil
    end
    local colon = find(host, ":", 1, true)
    if colon then
        host = sub(host, 1, colon - 1)
    end
    host = lower(host)
    local n = #host
    for i = 1, #domains do
        local d = domains[i]
        local dn = #d
        if n > dn + 1 and byte(host, n - dn) == 46 and sub(host, n - dn + 1) == d then
            return sub(host, 1, n - dn - 1)
        end
    end
    return nil
end

--- The level a request addresses: "service" (no bucket: ListBuckets), "bucket" or "object"
-- (the same answer as address(), without creating the bucket's and key's strings).
function _M.level(vbucket, path)
    if vbucket then
        return (path == "/" or path == "" or path == nil) and "bucket" or "object"
    end
    if path == nil or path == "/" or path == "" then
        return "service"
    end
    local start = byte(path, 1) == SLASH and 2 or 1
    local slash = find(path, "/", start, true)
    if slash == nil or slash == #path then
        return "bucket"
    end
    return "object"
end

--- Bucket and key of a request: vbucket (from vhost_bucket) or the first path segment of the
-- raw path (raw_path). Returns bucket (nil for the service: ListBuckets) and key (nil at bucket
-- level), both %XX-decoded as S3 servers decode them: "/bkt/../k" is key "../k" of "bkt",
-- "/bkt//k" key "/k", "/bkt/a%2Fb" key "a/b", "/bkt/a;b" key "a;b".
function _M.address(vbucket, path)
    path = path or "/"
    if vbucket then
        if path == "/" or path == "" then
            return vbucket, nil
        end
        return vbucket, unescape(sub(path, byte(path, 1) == SLASH and 2 or 1))
    end
    if path == "/" or path == "" then
        return nil, nil
    end
    local start = byte(path, 1) == SLASH and 2 or 1
    local slash = find(path, "/", start, true)
    if not slash then
        return unescape(sub(path, start)), nil
    end
    local key = sub(path, slash + 1)
    return unescape(sub(path, start, slash - 1)), key ~= "" and unescape(key) or nil
end

-- Sub-resources of buckets and objects that are configuration, priced as metadata operations.
local SUBRESOURCES = {
    "acl", "tagging", "policy", "versioning", "lifecycle", "cors", "location", "website",
    "logging", "notification", "replication", "encryption", "object-lock", "retention",
    "legal-hold", "accelerate", "requestPayment", "ownershipControls", "publicAccessBlock",
    "analytics", "inventory", "metrics", "intelligent-tiering", "policyStatus", "torrent",
    "attributes",
}
_M.SUBRESOURCES = SUBRESOURCES

local function has(q, name)
    return arg(q, name) ~= nil
end

local function subresource(q)
    if not q or q == "" then
        return false
    end
    for i = 1, #SUBRESOURCES do
        if has(q, SUBRESOURCES[i]) then
            return true
        end
    end
    return false
end
_M.subresource = subresource

--- The S3 operation of a request. Parameters that name an operation whatever the path
-- (uploadId, uploads, partNumber, list-type, delete, select, restore) decide first; the level
-- and the sub-resources decide the rest.
-- @param method string HTTP method (upper case)
-- @param level string "service" (no bucket), "bucket" or "object"
-- @param q string|nil raw query string
-- @param copy_source boolean the request carries x-amz-copy-source
-- @return op name, or nil and "unsupported_method"
function _M.operation(method, level, q, copy_source)
    if method == "GET" then
        if q then
            if has(q, "uploadId") then
                return "ListParts"
            end
            if has(q, "uploads") then
                return "ListMultipartUploads"
            end
            if has(q, "list-type") then
                return "ListObjectsV2"
            end
        end
        if level == "object" then
            if q and subresource(q) then
                return "GetObjectMetadata"
            end
            return "GetObject"
        end
        if level == "service" then
            return "ListBuckets"
        end
        if q then
            if has(q, "versions") then
                return "ListObjectVersions"
            end
            if subresource(q) then
                return "GetBucketMetadata"
            end
        end
        return "ListObjects"
    elseif method == "HEAD" then
        return level == "object" and "HeadObject" or "HeadBucket"
    elseif method == "PUT" then
        if q and has(q, "partNumber") and has(q, "uploadId") then
            return copy_source and "UploadPartCopy" or "UploadPart"
        end
        if copy_source then
            return "CopyObject"
        end
        if q and subresource(q) then
            return level == "object" and "PutObjectMetadata" or "PutBucketMetadata"
        end
        return level == "object" and "PutObject" or "CreateBucket"
    elseif method == "POST" then
        if q then
            if has(q, "uploads") then
                return "CreateMultipartUpload"
            end
            if has(q, "uploadId") then
                return "CompleteMultipartUpload"
            end
            if has(q, "delete") then
                return "DeleteObjects"
            end
            if has(q, "select") then
                return "SelectObjectContent"
            end
            if has(q, "restore") then
                return "RestoreObject"
            end
        end
        return "PostObject"
    elseif method == "DELETE" then
        if q then
            if has(q, "uploadId") then
                return "AbortMultipartUpload"
            end
            if subresource(q) then
                return level == "object" and "DeleteObjectMetadata" or "DeleteBucketMetadata"
            end
        end
        return level == "object" and "DeleteObject" or "DeleteBucket"
    elseif method == "OPTIONS" then
        return "Options"
    elseif method == "PATCH" then
        return "Patch"
    end
    return nil, "unsupported_method"
end

--- Whether an upload (PutObject, UploadPart) sent with `Transfer-Encoding` announces no size at
-- all: neither Content-Length nor x-amz-decoded-content-length (headers: tollgate.request.headers).
-- S3 (AWS, versitygw, MinIO) refuses it `411 MissingContentLength` before it reads the body; the
-- gateway answers that itself, so that nginx never streams a body to a backend that already
-- answered (docs/s3.md, "Bodies").
function _M.length_required(op, headers)
    if op ~= "PutObject" and op ~= "UploadPart" then
        return false
    end
    return headers["transfer-encoding"] ~= nil and headers["content-length"] == nil
        and tonumber(headers["x-amz-decoded-content-length"]) == nil
end

local XML_ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
                  ["'"] = "&apos;" }

local function xml_escape(s)
    return (gsub(s, "[&<>\"']", XML_ESC))
end
_M.xml_escape = xml_escape

--- The S3 XML error body: code, message, resource, request id (and extra elements as an
-- array of {name, value} pairs, e.g. {"AWSAccessKeyId", key}).
function _M.error_xml(code, message, resource, request_id, extra)
    local parts = { '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>', code,
                    "</Code><Message>", xml_escape(message or ""), "</Message>" }
    if extra then
        for i = 1, #extra do
            local e = extra[i]
            parts[#parts + 1] = "<" .. e[1] .. ">" .. xml_escape(tostring(e[2])) .. "</" .. e[1]
                .. ">"
        end
    end
    parts[#parts + 1] = "<Resource>" .. xml_escape(resource or "") .. "</Resource><RequestId>"
        .. xml_escape(request_id or "") .. "</RequestId></Error>"
    return table.concat(parts)
end

--- The S3 error code of the first bytes of an error body, or nil.
function _M.error_code(body)
    if type(body) ~= "string" then
        return nil
    end
    return body:match("<Code>([%w%.]+)</Code>")
end

return _M
