-- Cost of a request: C_base(op) + ceil(bytes / quantum) * C_bw, capped (Req 1, docs/design.md §2).
-- Pure Lua (no ngx): the operation table with its base costs and the arithmetic (the
-- classifier is tollgate.s3).
local ceil = math.ceil
local floor = math.floor
local tonumber = tonumber
local type = type

local _M = {}

-- The S3 operations (tollgate.s3 classifies requests into them): name, cost class, default
-- base cost. A class is the coarse name costs were configured by before the operation table
-- (GET, LIST, PUT, ...): configuring a class sets every operation of it, configuring an
-- operation sets that one (after the classes). DeleteObjects is charged per key it deletes.
local OPERATIONS = {
    { "ListBuckets", "LIST", 3 },
    { "ListObjects", "LIST", 3 },
    { "ListObjectsV2", "LIST", 3 },
    { "ListObjectVersions", "LIST", 3 },
    { "ListMultipartUploads", "LIST", 3 },
    { "ListParts", "LIST", 3 },
    { "HeadBucket", "HEAD", 1 },
    { "HeadObject", "HEAD", 1 },
    { "GetObject", "GET", 1 },
    { "PutObject", "PUT", 5 },
    { "CreateBucket", "PUT", 5 },
    { "CopyObject", "COPY", 6 },
    { "UploadPartCopy", "COPY", 6 },
    { "UploadPart", "MULTIPART_UPLOAD", 4 },
    { "CreateMultipartUpload", "MULTIPART_INIT", 2 },
    { "CompleteMultipartUpload", "MULTIPART_COMPLETE", 8 },
    { "AbortMultipartUpload", "MULTIPART_ABORT", 3 },
    { "DeleteObject", "DELETE", 2 },
    { "DeleteBucket", "DELETE", 2 },
    { "DeleteObjects", "DELETE", 2 },
    { "PostObject", "POST", 5 },
    { "SelectObjectContent", "POST", 5 },
    { "RestoreObject", "POST", 5 },
    { "GetBucketMetadata", "METADATA", 1 },
    { "GetObjectMetadata", "METADATA", 1 },
    { "PutBucketMetadata", "METADATA", 2 },
    { "PutObjectMetadata", "METADATA", 2 },
    { "DeleteBucketMetadata", "METADATA", 2 },
    { "DeleteObjectMetadata", "METADATA", 2 },
    { "Options", "OPTIONS", 1 },
    { "Patch", "PATCH", 3 },
}
_M.OPERATIONS = OPERATIONS

local DEFAULT_BASE, CLASS_OF, CLASSES = {}, {}, {}
for _, o in ipairs(OPERATIONS) do
    DEFAULT_BASE[o[1]] = o[3]
    CLASS_OF[o[1]] = o[2]
    CLASSES[o[2]] = true
end
_M.DEFAULT_BASE = DEFAULT_BASE
_M.CLASS_OF = CLASS_OF
_M.CLASSES = CLASSES
_M.OPS = {}
for _, o in ipairs(OPERATIONS) do
    _M.OPS[#_M.OPS + 1] = o[1]
end

-- Operations charged per key of their body (DeleteObjects: base x keys deleted).
_M.PER_KEY = { DeleteObjects = true }

-- Every request pays for the body it sends (Req 1.1); these operations also pay for the body
-- they receive (download bandwidth, charged after the response).
local DOWNLOAD = { GetObject = true }
_M.DOWNLOAD = DOWNLOAD

--- Parse a cost list "GetObject=1,LIST=4" (TOLLGATE_COSTS) into {name = n}; nil, err when
-- malformed. Names are checked by new().
function _M.parse_list(s)
    local t = {}
    if s == nil or s == "" then
        return t
    end
    for item in (s .. ","):gmatch("([^,]*),") do
        item = item:gsub("^%s+", ""):gsub("%s+$", "")
        local name, v = item:match("^([%w_]+)%s*=%s*(%d+)$")
        if not name then
            return nil, "expected NAME=INTEGER, got '" .. item .. "'"
        end
        t[name] = tonumber(v)
    end
    return t
end

--- Bandwidth units of a byte count: ceil(bytes / quantum), 0 for no body.
function _M.units(bytes, quantum)
    if not bytes or bytes <= 0 then
        return 0
    end
    return ceil(bytes / quantum)
end

--- A calculator with its own base costs, quantum and cap, and the bytes a chunked upload
-- without a declared size pays up front (TOLLGATE_CHUNKED_ESTIMATE).
-- @param opts table|nil {base = {OP = n}, quantum = 65536, max_cost = 1000000}
function _M.new(opts, chunked_estimate)
    opts = opts or {}
    local base = {}
    for op, v in pairs(DEFAULT_BASE) do
        base[op] = v
    end
    local given = opts.base or {}
    for name, v in pairs(given) do
        if DEFAULT_BASE[name] == nil and not CLASSES[name] then
            return nil, "unknown operation in cost table: " .. tostring(name)
        end
        if type(v) ~= "number" or v < 0 or v ~= floor(v) then
            return nil, "base cost of " .. name .. " must be a non-negative integer"
        end
    end
    for op, class in pairs(CLASS_OF) do     -- classes first, then single operations
        if given[class] ~= nil then
            base[op] = given[class]
        end
    end
    for op in pairs(DEFAULT_BASE) do
        if given[op] ~= nil then
            base[op] = given[op]
        end
    end
    local quantum = opts.quantum or 65536
    if type(quantum) ~= "number" or quantum < 1 or quantum ~= floor(quantum) then
        return nil, "quantum must be a positive integer"
    end
    local max_cost = opts.max_cost or 1000000
    if type(max_cost) ~= "number" or max_cost < 1 then
        return nil, "max_cost must be positive"
    end
    return setmetatable({ base = base, quantum = quantum, max_cost = max_cost,
                          chunked_estimate = chunked_estimate or 1048576 }, { __index = _M })
end

--- Cost of an operation moving `bytes` with bandwidth coefficient c_bw (Property 1); `keys`
-- multiplies the base of a per-key operation (DeleteObjects).
function _M.calculate(self, op, bytes, c_bw, keys)
    local c = (self.base[op] or 0) * (keys or 1) + _M.units(bytes, self.quantum) * (c_bw or 1)
    if c > self.max_cost then
        c = self.max_cost
    end
    return c
end

--- Bandwidth-only cost of `bytes` (post-hoc charges), capped so that already + extra <= max.
function _M.bandwidth(self, bytes, c_bw, already)
    local c = _M.units(bytes, self.quantum) * (c_bw or 1)
    local room = self.max_cost - (already or 0)
    if room < 0 then
        room = 0
    end
    if c > room then
        c = room
    end
    return c
end

--- Bytes a chunked upload is expected to carry: its decoded length, else the chunked estimate;
-- never more than a Content-Length the request also announces (the bytes it can carry). The
-- access phase caps the charge at what the app can ever hold, and the log phase settles it
-- against the bytes that arrived.
function _M.upload_estimate(self, headers)
    local n = tonumber(headers["x-amz-decoded-content-length"])
    if not n or n < 0 then
        n = self.chunked_estimate
    end
    local len = tonumber(headers["content-length"])
    if len and len < n then
        return len
    end
    return n
end

-- running average of download sizes per app, per worker (no shared-memory work per request)
local dl_avg = {}

--- Bytes a download is expected to return: the Range if bounded, else the app's average (the
-- access phase caps the charge at what the app can ever hold; the log phase settles it against
-- $body_bytes_sent).
function _M.download_estimate(a, headers)
    local range = headers["range"]
    if type(range) == "string" then
        local first, last = range:match("^bytes=(%d+)-(%d+)$")
        if first then
            return tonumber(last) - tonumber(first) + 1
        end
    end
    return dl_avg[a.id] or 0
end

--- Remember a download's real size in the app's running average.
function _M.observe_download(a, bytes)
    local avg = dl_avg[a.id]
    dl_avg[a.id] = avg and floor(avg + 0.2 * (bytes - avg)) or bytes
end

--- Price a request of app a (its c_bw) doing op on nkeys keys (DeleteObjects), from its
-- headers (tollgate.request.headers): the known cost (C_base + request body), the estimate of
-- bandwidth settled after the response (chunked upload, download) and a multipart reservation
-- to open. Returns cost, estimate, reserve, chunked (multiple values: no table per request).
function _M.price(self, a, op, headers, nkeys)
    local estimate, reserve, chunked = 0, 0, false
    local bytes = 0
    local te = headers["transfer-encoding"]
    if te and te ~= "identity" then
        chunked = true
    else
        bytes = tonumber(headers["content-length"]) or 0
    end
    local cost = self:calculate(op, bytes, a.c_bw, nkeys)
    if chunked then
        estimate = self:bandwidth(self:upload_estimate(headers), a.c_bw, cost)
    elseif DOWNLOAD[op] then
        estimate = self:bandwidth(_M.download_estimate(a, headers), a.c_bw, cost)
    elseif op == "CreateMultipartUpload" then
        local expected = tonumber(headers["x-tollgate-expected-size"])
        if expected and expected > 0 then
            reserve = self:bandwidth(expected, a.c_bw, cost)
        end
    end
    return cost, estimate, reserve, chunked
end

return _M
