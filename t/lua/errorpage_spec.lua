-- nginx's own answers in S3's dialect (tollgate.s3.errorpage): the code of each status, the
-- target nginx refuses while it parses the request line (dot-segments above the root).
package.path = "lua/?.lua;" .. package.path
local ep = require("tollgate.s3.errorpage")

describe("dot-segments above the root", function()
    it("are found as nginx resolves them", function()
        for _, p in ipairs({ "/..", "/../k", "/bkt/../../k", "/bkt/%2E%2E/%2e%2e/k", "/a/./../../k",
                             "/bkt/..%2F../k/../../.." }) do
            assert.is_true(ep.climbs(p), p)
        end
    end)
    it("are not found in keys that stay under the root", function()
        for _, p in ipairs({ "/", "/bkt/../k", "/bkt/a/../../k", "/bkt//../../k", "/bkt/...",
                             "/bkt/..k", "/bkt/k..", "/./bkt", "/bkt/%2E%2E", "/bkt/%2F../k" }) do
            assert.is_false(ep.climbs(p), p)
        end
    end)
end)

describe("the request target of a request line", function()
    it("is the second field", function()
        assert.equal("/bkt/../../k", ep.target("GET /bkt/../../k HTTP/1.1"))
        assert.equal("/x", ep.target("GET /x"))
        assert.is_nil(ep.target("GARBAGE"))
        assert.is_nil(ep.target(nil))
    end)
end)

describe("the page of a status", function()
    it("keeps S3's code for each status nginx answers", function()
        local want = {
            [400] = "BadRequest", [404] = "NoSuchBucket", [405] = "MethodNotAllowed",
            [408] = "RequestTimeout",
            [411] = "MissingContentLength", [413] = "EntityTooLarge", [414] = "InvalidURI",
            [500] = "InternalError", [501] = "NotImplemented", [502] = "ServiceUnavailable",
            [503] = "ServiceUnavailable", [504] = "RequestTimeout", [505] = "NotImplemented",
        }
        for status, code in pairs(want) do
            assert.equal(code, ep.page(status, nil, "/bkt/k", "GET /bkt/k HTTP/1.1")[1], status)
        end
    end)
    it("names a target nginx could not read an invalid URI", function()
        assert.equal("InvalidURI", ep.page(400, nil, nil, "GET /bkt/../../k HTTP/1.1")[1])
        assert.equal("InvalidURI", ep.page(400, nil, "", "PUT /../k HTTP/1.1")[1])
        -- a target nginx read: the 400 is about something else
        assert.equal("BadRequest", ep.page(400, nil, "/bkt/k", "GET /bkt/k HTTP/1.1")[1])
        assert.equal("BadRequest", ep.page(400, nil, nil, "GET /bkt/k HTTP/1.1")[1])
    end)
    it("names an oversized header section", function()
        assert.equal("RequestHeaderSectionTooLarge",
            ep.page(400, "header", "/bkt/k", "GET /bkt/k HTTP/1.1")[1])
    end)
    it("falls back by class", function()
        assert.equal("InternalError", ep.page(507, nil, "/", "GET / HTTP/1.1")[1])
        assert.equal("BadRequest", ep.page(418, nil, "/", "GET / HTTP/1.1")[1])
    end)
end)
