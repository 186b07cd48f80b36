-- Cost of a request: C_base(op) + ceil(bytes / quantum) * C_bw, capped (Req 1, DESIGN §2).
-- Pure Lua (no ngx): the operation classifier for S3 request shapes and the arithmetic.
local ceil = math.ceil
local floor = math.floor
local find = string.find
local byte = string.byte
local tonumber = tonumber
local type = type

local _M = {}

local DEFAULT_BASE = {
    GET = 1, HEAD = 1, OPTIONS = 1,
    PUT = 5, POST = 5, PATCH = 3, DELETE = 2,
    LIST = 3, COPY = 6,
    MULTIPART_INIT = 2, MULTIPART_UPLOAD = 4, MULTIPART_COMPLETE = 8, MULTIPART_ABORT = 3,
}
_M.DEFAULT_BASE = DEFAULT_BASE
_M.OPS = {}
for op in pairs(DEFAULT_BASE) do
    _M.OPS[#_M.OPS + 1] = op
end
table.sort(_M.OPS)

-- Every request pays for the body it sends (Req 1.1); these operations also pay for the body
-- they receive (download bandwidth, charged after the response).
local DOWNLOAD = { GET = true }
_M.DOWNLOAD = DOWNLOAD

local AMP = byte("&")
local EQ = byte("=")

-- true when the query string q has a parameter named `name` (with or without a value)
local function has_arg(q, name)
    if not q or q == "" then
        return false
    end
    local n = #name
    local init = 1
    while true do
        local s, e = find(q, name, init, true)
        if not s then
            return false
        end
        local before = s == 1 or byte(q, s - 1) == AMP
        local after = byte(q, e + 1)
        if before and (after == nil or after == EQ or after == AMP) then
            return true
        end
        init = s + n
    end
end
_M.has_arg = has_arg

-- true when the path addresses a bucket rather than an object: "/", "/b", "/b/"
local function is_bucket_path(path)
    if not path or path == "" or path == "/" then
        return true
    end
    local slash = find(path, "/", 2, true)
    return slash == nil or slash == #path
end
_M.is_bucket_path = is_bucket_path

--- Classify an S3-style request.
-- @param method string HTTP method (upper case)
-- @param path string URI path without query (only a GET looks at it: nil is fine otherwise)
-- @param query string|nil raw query string
-- @param copy_source boolean the request carries x-amz-copy-source
-- @return op string, or nil and "unsupported_method"
function _M.classify(method, path, query, copy_source)
    if method == "GET" then
        if is_bucket_path(path) or has_arg(query, "list-type") or has_arg(query, "uploads")
                or has_arg(query, "uploadId") then
            return "LIST"
        end
        return "GET"
    elseif method == "HEAD" then
        return "HEAD"
    elseif method == "PUT" then
        if copy_source then
            return "COPY"
        end
        if has_arg(query, "uploadId") and has_arg(query, "partNumber") then
            return "MULTIPART_UPLOAD"
        end
        return "PUT"
    elseif method == "POST" then
        if has_arg(query, "uploads") then
            return "MULTIPART_INIT"
        end
        if has_arg(query, "uploadId") then
            return "MULTIPART_COMPLETE"
        end
        return "POST"
    elseif method == "DELETE" then
        if has_arg(query, "uploadId") then
            return "MULTIPART_ABORT"
        end
        return "DELETE"
    elseif method == "PATCH" then
        return "PATCH"
    elseif method == "OPTIONS" then
        return "OPTIONS"
    end
    return nil, "unsupported_method"
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
    for op, v in pairs(opts.base or {}) do
        if DEFAULT_BASE[op] == nil then
            return nil, "unknown operation in cost table: " .. tostring(op)
        end
        if type(v) ~= "number" or v < 0 or v ~= floor(v) then
            return nil, "base cost of " .. op .. " must be a non-negative integer"
        end
        base[op] = v
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

--- Cost of an operation moving `bytes` with bandwidth coefficient c_bw (Property 1).
function _M.calculate(self, op, bytes, c_bw)
    local c = (self.base[op] or 0) + _M.units(bytes, self.quantum) * (c_bw or 1)
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

--- Bytes a chunked upload is expected to carry: its decoded length, else the chunked estimate.
function _M.upload_estimate(self, headers)
    local n = tonumber(headers["x-amz-decoded-content-length"])
    if n and n >= 0 then
        return n
    end
    return self.chunked_estimate
end

-- running average of download sizes per app, per worker (no shared-memory work per request)
local dl_avg = {}

--- Bytes a download is expected to return: the Range if bounded, else the app's average.
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

--- Price a request of app a (its c_bw) doing op, from its headers (tollgate.request.headers):
-- the known cost (C_base + request body), the estimate of bandwidth settled after the
-- response (chunked upload, download) and a multipart reservation to open. Returns cost,
-- estimate, reserve, chunked (multiple values: no table per request).
function _M.price(self, a, op, headers)
    local estimate, reserve, chunked = 0, 0, false
    local bytes = 0
    local te = headers["transfer-encoding"]
    if te and te ~= "identity" then
        chunked = true
    else
        bytes = tonumber(headers["content-length"]) or 0
    end
    local cost = self:calculate(op, bytes, a.c_bw)
    if chunked then
        estimate = self:bandwidth(self:upload_estimate(headers), a.c_bw, cost)
    elseif DOWNLOAD[op] then
        estimate = self:bandwidth(_M.download_estimate(a, headers), a.c_bw, cost)
    elseif op == "MULTIPART_INIT" then
        local expected = tonumber(headers["x-tollgate-expected-size"])
        if expected and expected > 0 then
            reserve = self:bandwidth(expected, a.c_bw, cost)
        end
    end
    return cost, estimate, reserve, chunked
end

return _M
