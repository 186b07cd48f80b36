-- Cost of a request: C_base(op) + ceil(bytes / quantum) * C_bw, capped (Req 1, DESIGN §2).
-- Pure Lua (no ngx): the operation table with its base costs and the arithmetic (the
-- classifier is tollgate.s3).
local ceil = math.ceil
local floor = math.floor

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

--- A calculator with its own base costs, quantum and cap.
-- @param opts table|nil {base = {OP = n}, quantum = 65536, max_cost = 1000000}
function _M.new(opts)
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
    return setmetatable({ base = base, quantum = quantum, max_cost = max_cost }, { __index = _M })
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


return _M
