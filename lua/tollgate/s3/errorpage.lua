-- nginx's own answers in S3's XML error dialect: the content handler (tollgate.handler's
-- s3_error) of the named locations that nginx/tollgate_s3_errors.conf sends nginx's error pages
-- to (a request line or header nginx cannot parse, a backend that is down or too slow, an error
-- of the gateway itself). The status stays nginx's; the body is <Error><Code>…</Code><Message>…
-- </Message><Resource>…</Resource><RequestId>…</RequestId></Error>, with the codes S3 servers
-- use (docs/s3.md, "Errors nginx answers itself"). An answer tollgate or the backend already
-- gave is never one of these: nginx sends an error page only for an answer it makes up itself.
-- page() and climbs() are pure Lua; run() uses ngx.
local s3 = require("tollgate.s3")

local find = string.find
local sub = string.sub
local gsub = string.gsub
local gmatch = string.gmatch
local type = type

local _M = {}

-- status -> S3 code, message (AWS S3's messages where S3 has the code)
local PAGES = {
    [400] = { "BadRequest", "An error occurred when parsing the HTTP request." },
    [404] = { "NoSuchBucket", "The specified bucket does not exist." },
    [405] = { "MethodNotAllowed", "The specified method is not allowed against this resource." },
    [408] = { "RequestTimeout", "Your socket connection to the server was not read from or "
        .. "written to within the timeout period. Idle connections will be closed." },
    [411] = { "MissingContentLength", "You must provide the Content-Length HTTP header." },
    [413] = { "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size." },
    [414] = { "InvalidURI", "The request URI is longer than the gateway accepts." },
    [500] = { "InternalError", "We encountered an internal error. Please try again." },
    [501] = { "NotImplemented",
        "A header you provided implies functionality that is not implemented." },
    [502] = { "ServiceUnavailable", "The storage service behind the gateway could not be "
        .. "reached or gave no valid answer. Please try again." },
    [503] = { "ServiceUnavailable", "Please reduce your request rate." },
    [504] = { "RequestTimeout", "The storage service behind the gateway did not answer in time. "
        .. "Please try again." },
    [505] = { "NotImplemented", "The HTTP version of the request is not supported." },
}
_M.PAGES = PAGES

local INVALID_URI = { "InvalidURI", "Couldn't parse the specified URI." }
local HEADER_TOO_LARGE = { "RequestHeaderSectionTooLarge",
    "Your request header section exceeds the maximum allowed size." }
_M.INVALID_URI, _M.HEADER_TOO_LARGE = INVALID_URI, HEADER_TOO_LARGE

--- Whether the dot-segments of raw path `path` climb above its root as nginx resolves them
-- ("%2E" read as ".", "%2F" as "/", an empty segment of "//" a level of its own): nginx refuses
-- such a target with 400 while it parses the request line, before any module runs.
function _M.climbs(path)
    if type(path) ~= "string" then
        return false
    end
    path = gsub(gsub(path, "%%2[Ee]", "."), "%%2[Ff]", "/")
    local depth = 0
    for seg in gmatch(path, "/([^/]*)") do
        if seg == ".." then
            if depth == 0 then
                return true
            end
            depth = depth - 1
        elseif seg ~= "." then
            depth = depth + 1
        end
    end
    return false
end

--- The request target of a request line ("GET /bkt/k HTTP/1.1" -> "/bkt/k"), or nil.
function _M.target(line)
    if type(line) ~= "string" then
        return nil
    end
    local s = find(line, " ", 1, true)
    if not s then
        return nil
    end
    local e = find(line, " ", s + 1, true)
    return sub(line, s + 1, (e or #line + 1) - 1)
end

--- The S3 code and message of nginx's answer `status` to a request whose raw target nginx
-- could not read ($request_uri empty) and whose request line is `line`; `which` names a page
-- by the named location ("header": header section too large).
function _M.page(status, which, uri, line)
    if which == "header" then
        return HEADER_TOO_LARGE
    end
    if status == 400 and (uri == nil or uri == "") then
        local target = _M.target(line)
        if target and _M.climbs(s3.raw_path(target)) then
            return INVALID_URI
        end
    end
    local p = PAGES[status]
    if p then
        return p
    end
    if status >= 500 then
        return PAGES[500]
    end
    return PAGES[400]
end

--- Content handler of the error page: nginx's status kept, S3's XML body.
function _M.run(which)
    local var = ngx.var
    local status = ngx.status
    if status < 400 then
        status = 500
    end
    local uri = var.request_uri
    local line = var.request       -- the request line
    local p = _M.page(status, which, uri, line)
    local target = (uri ~= nil and uri ~= "") and uri or _M.target(line)
    local body = s3.error_xml(p[1], p[2], s3.raw_path(target), var.request_id)
    local header = ngx.header
    header["Content-Type"] = "application/xml"
    header["Content-Length"] = #body
    header["Cache-Control"] = "no-store"
    ngx.status = status
    ngx.print(body)
end

return _M
