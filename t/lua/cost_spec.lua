-- The cost calculator and the S3 operation classifier (Req 1, Property 1, DESIGN §2).
package.path = "lua/?.lua;" .. package.path
local cost = require("tollgate.cost")

describe("classify", function()
    local cases = {
        { "GET", "/b/k", nil, false, "GET" },
        { "GET", "/b/dir/k.txt", "versionId=3", false, "GET" },
        { "HEAD", "/b/k", nil, false, "HEAD" },
        { "GET", "/b", nil, false, "LIST" },
        { "GET", "/b/", nil, false, "LIST" },
        { "GET", "/", nil, false, "LIST" },
        { "GET", "/b", "list-type=2&prefix=a", false, "LIST" },
        { "GET", "/b", "uploads", false, "LIST" },
        { "GET", "/b/k", "uploadId=7", false, "LIST" },
        { "PUT", "/b/k", nil, false, "PUT" },
        { "PUT", "/b/k", nil, true, "COPY" },
        { "PUT", "/b/k", "partNumber=1&uploadId=x", false, "MULTIPART_UPLOAD" },
        { "PUT", "/b/k", "uploadId=x", false, "PUT" },
        { "POST", "/b/k", "uploads", false, "MULTIPART_INIT" },
        { "POST", "/b/k", "uploads=", false, "MULTIPART_INIT" },
        { "POST", "/b/k", "uploadId=x", false, "MULTIPART_COMPLETE" },
        { "POST", "/b", "delete", false, "POST" },
        { "POST", "/b/k", "myuploads=1", false, "POST" },
        { "DELETE", "/b/k", nil, false, "DELETE" },
        { "DELETE", "/b/k", "uploadId=x", false, "MULTIPART_ABORT" },
        { "DELETE", "/b/k", "xuploadId=x", false, "DELETE" },
        { "PATCH", "/b/k", nil, false, "PATCH" },
        { "OPTIONS", "/b/k", nil, false, "OPTIONS" },
    }
    for _, c in ipairs(cases) do
        it(c[1] .. " " .. c[2] .. "?" .. tostring(c[3]) .. " -> " .. c[5], function()
            assert.are.equal(c[5], (cost.classify(c[1], c[2], c[3], c[4])))
        end)
    end
    it("needs the path of a GET only (the handler reads $uri for GETs alone)", function()
        for _, c in ipairs(cases) do
            if c[1] ~= "GET" then
                assert.are.equal(c[5], (cost.classify(c[1], nil, c[3], c[4])))
            end
        end
    end)
    it("refuses unknown methods", function()
        for _, m in ipairs({ "FOO", "PROPFIND", "TRACE", "CONNECT", "get" }) do
            local op, err = cost.classify(m, "/b/k", nil, false)
            assert.is_nil(op)
            assert.are.equal("unsupported_method", err)
        end
    end)
end)

describe("calculate", function()
    local calc = assert(cost.new())
    it("uses the default base costs of Req 1", function()
        assert.are.equal(1, calc:calculate("GET", 0, 1))
        assert.are.equal(5, calc:calculate("PUT", 0, 1))
        assert.are.equal(5, calc:calculate("POST", 0, 1))
        assert.are.equal(2, calc:calculate("DELETE", 0, 1))
        assert.are.equal(3, calc:calculate("LIST", 0, 1))
        assert.are.equal(6, calc:calculate("COPY", 0, 1))
        assert.are.equal(8, calc:calculate("MULTIPART_COMPLETE", 0, 1))
    end)
    it("charges ceil(bytes / 64 KiB) * C_bw", function()
        assert.are.equal(5 + 1, calc:calculate("PUT", 1, 1))
        assert.are.equal(5 + 1, calc:calculate("PUT", 65536, 1))
        assert.are.equal(5 + 2, calc:calculate("PUT", 65537, 1))
        assert.are.equal(5 + 6, calc:calculate("PUT", 65537, 3))
        assert.are.equal(5, calc:calculate("PUT", 65537, 0))
    end)
    it("caps at 1,000,000", function()
        assert.are.equal(1000000, calc:calculate("PUT", 2 ^ 40, 1))
        assert.are.equal(1000000 - 7, calc:bandwidth(2 ^ 40, 1, 7))
        assert.are.equal(0, calc:bandwidth(2 ^ 40, 1, 1000000))
    end)
    it("holds Property 1 for 10000 generated cases", function()
        math.randomseed(20261121)
        local ops = cost.OPS
        for _ = 1, 10000 do
            local op = ops[math.random(#ops)]
            local bytes = math.random(0, 3) == 0 and 0 or math.floor(math.random() ^ 3 * 2 ^ 36)
            local c_bw = math.random(0, 20)
            local want = cost.DEFAULT_BASE[op] + math.ceil(bytes / 65536) * c_bw
            if want > 1000000 then
                want = 1000000
            end
            local got = calc:calculate(op, bytes, c_bw)
            assert.are.equal(want, got, op .. " " .. bytes .. " " .. c_bw)
            assert.is_true(got <= 1000000)
        end
    end)
    it("accepts a configured cost table and rejects bad ones", function()
        local c2 = assert(cost.new({ base = { GET = 2 }, quantum = 1024 }))
        assert.are.equal(2 + 2, c2:calculate("GET", 1025, 1))
        assert.is_nil((cost.new({ base = { FOO = 1 } })))
        assert.is_nil((cost.new({ base = { GET = -1 } })))
        assert.is_nil((cost.new({ base = { GET = 1.5 } })))
        assert.is_nil((cost.new({ quantum = 0 })))
    end)
end)
