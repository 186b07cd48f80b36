-- S3 request parsing: credentials, addressing, the operation table, the XML error body
-- (DeleteObjects bodies: delete_spec.lua).
package.path = "lua/?.lua;" .. package.path
local s3 = require("tollgate.s3")
local cost = require("tollgate.cost")

describe("access key ids", function()
    it("accept AWS-style and MinIO/Ceph-style keys", function()
        for _, k in ipairs({ "AKIAIOSFODNN7EXAMPLE", "AKIA" .. string.rep("Z", 124), "abc",
                             "minio-user_1", "ceph.user:x", "a+b=c~!", string.rep("k", 128) }) do
            assert.is_true(s3.valid_key(k), k)
        end
    end)
    it("refuse short, long, slash, comma, whitespace and non-ASCII keys", function()
        for _, k in ipairs({ "", "ab", string.rep("k", 129), "a/b", "a,b", "a b", "a\tb",
                             "a\nb", "é-key", "key\0", 42 }) do
            assert.is_false(s3.valid_key(k), tostring(k))
        end
    end)
end)

describe("credential extraction", function()
    local cases = {
        -- Authorization header, query, form -> key, form
        { "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            .. "SignedHeaders=host;range;x-amz-date, Signature=fe5f80f77d5fa3beca038a248ff027d0",
          nil, "AKIAIOSFODNN7EXAMPLE", "v4" },
        { "AWS4-HMAC-SHA256 Credential=minio-user/20260101/us-east-1/s3/aws4_request,"
            .. "SignedHeaders=host,Signature=abc", nil, "minio-user", "v4" },
        { "AWS4-ECDSA-P256-SHA256 Credential=AKIDV4A/20260101/s3/aws4_request, Signature=x", nil,
          "AKIDV4A", "v4" },
        { "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", nil, "AKIAIOSFODNN7EXAMPLE",
          "v2" },
        { "AWS ceph:user:sig=", nil, "ceph:user", "v2" },
        { nil, "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20130524%2F"
            .. "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Signature=aa",
          "AKIAEXAMPLE", "presigned-v4" },
        { nil, "X-Amz-Credential=my%2Bkey/20130524/us-east-1/s3/aws4_request", "my+key",
          "presigned-v4" },
        { nil, "AWSAccessKeyId=AKIAV2EXAMPLE&Expires=1141889120&Signature=vjby%2B", "AKIAV2EXAMPLE",
          "presigned-v2" },
        { nil, "prefix=a&max-keys=2", nil, nil },
        { nil, "xAWSAccessKeyId=nope", nil, nil },
        { "Bearer abc", nil, nil, nil },
        { "AWS4-HMAC-SHA256 SignedHeaders=host", nil, nil, nil },
        { "AWS nocolon", nil, nil, nil },
    }
    for i, c in ipairs(cases) do
        it("case " .. i .. " -> " .. tostring(c[3]), function()
            local k, how = s3.from_authorization(c[1])
            if not k then
                k, how = s3.from_query(c[2])
            end
            assert.are.equal(c[3], k)
            assert.are.equal(c[4], how)
        end)
    end
    it("reads browser POST form fields before the file", function()
        local b = "----Boundary7MA4YWxk"
        local ct = "multipart/form-data; boundary=" .. b
        assert.are.equal(b, s3.form_boundary(ct))
        assert.are.equal(b, s3.form_boundary('multipart/form-data; boundary="' .. b .. '"'))
        assert.is_nil(s3.form_boundary("application/xml"))
        local function form(fields)
            local parts = {}
            for _, f in ipairs(fields) do
                parts[#parts + 1] = "--" .. b .. '\r\nContent-Disposition: form-data; name="'
                    .. f[1] .. '"\r\n\r\n' .. f[2] .. "\r\n"
            end
            return table.concat(parts) .. "--" .. b .. "--\r\n"
        end
        local v4 = form({ { "key", "photos/${filename}" },
                          { "X-Amz-Algorithm", "AWS4-HMAC-SHA256" },
                          { "X-Amz-Credential", "AKIAPOST/20260101/us-east-1/s3/aws4_request" },
                          { "Policy", "eyJ..." }, { "file", "DATA" } })
        assert.are.same({ "AKIAPOST", "post-v4" }, { s3.from_form(v4, b) })
        local v2 = form({ { "key", "k" }, { "AWSAccessKeyId", "AKIAV2POST" }, { "file", "x" } })
        assert.are.same({ "AKIAV2POST", "post-v2" }, { s3.from_form(v2, b) })
        -- a credential field after the file is not S3's: ignored
        local late = form({ { "key", "k" }, { "file", "x" }, { "AWSAccessKeyId", "AKIALATE" } })
        assert.is_nil((s3.from_form(late, b)))
        -- truncated before the field ends: nothing
        assert.is_nil((s3.from_form(v2:sub(1, 60), b)))
    end)
end)

describe("addressing", function()
    local domains = { "s3.localhost", "s3.example.com" }
    local cases = {
        -- host, path -> bucket, key
        { "localhost:8080", "/bkt/dir/key.txt", "bkt", "dir/key.txt" },
        { "bkt.s3.localhost:8080", "/dir/key.txt", "bkt", "dir/key.txt" },
        { "BKT.S3.Example.COM", "/dir/key.txt", "bkt", "dir/key.txt" },
        { "my.dotted.bkt.s3.localhost", "/k", "my.dotted.bkt", "k" },
        { "s3.localhost:8080", "/bkt/k", "bkt", "k" },
        { "bkt.s3.localhost", "/", "bkt", nil },
        { "localhost", "/bkt", "bkt", nil },
        { "localhost", "/bkt/", "bkt", nil },
        { "localhost", "/", nil, nil },
        { "s3.localhost", "/", nil, nil },
        { "xs3.localhost", "/bkt/k", "bkt", "k" },       -- not a subdomain: path style
        { "evils3.localhost", "/bkt/k", "bkt", "k" },
        { "127.0.0.1:9000", "/bkt/a/b/", "bkt", "a/b/" },
        { nil, "/bkt/k", "bkt", "k" },
    }
    for _, c in ipairs(cases) do
        it(tostring(c[1]) .. c[2] .. " -> " .. tostring(c[3]) .. " " .. tostring(c[4]), function()
            local vb = s3.vhost_bucket(c[1], domains)
            local b, k = s3.address(vb, c[2])
            assert.are.equal(c[3], b)
            assert.are.equal(c[4], k)
            assert.are.equal(b == nil and "service" or k == nil and "bucket" or "object",
                s3.level(vb, c[2]))
        end)
    end
    it("is path style without domains", function()
        assert.is_nil(s3.vhost_bucket("bkt.s3.localhost", {}))
        assert.is_nil(s3.vhost_bucket("bkt.s3.localhost", nil))
    end)
end)

describe("operation table", function()
    -- method, level, query, copy source -> operation
    local cases = {
        { "GET", "service", nil, false, "ListBuckets" },
        { "GET", "bucket", nil, false, "ListObjects" },
        { "GET", "bucket", "prefix=a&delimiter=%2F", false, "ListObjects" },
        { "GET", "bucket", "list-type=2&prefix=a", false, "ListObjectsV2" },
        { "GET", "bucket", "versions", false, "ListObjectVersions" },
        { "GET", "bucket", "versions&prefix=x", false, "ListObjectVersions" },
        { "GET", "bucket", "uploads", false, "ListMultipartUploads" },
        { "GET", "object", "uploadId=7", false, "ListParts" },
        { "GET", "bucket", "acl", false, "GetBucketMetadata" },
        { "GET", "bucket", "location", false, "GetBucketMetadata" },
        { "GET", "bucket", "versioning", false, "GetBucketMetadata" },
        { "GET", "bucket", "policy", false, "GetBucketMetadata" },
        { "GET", "bucket", "lifecycle", false, "GetBucketMetadata" },
        { "GET", "bucket", "cors", false, "GetBucketMetadata" },
        { "GET", "object", "tagging", false, "GetObjectMetadata" },
        { "GET", "object", "acl", false, "GetObjectMetadata" },
        { "GET", "object", nil, false, "GetObject" },
        { "GET", "object", "versionId=3", false, "GetObject" },
        { "GET", "object", "x-id=GetObject&partNumber=1", false, "GetObject" },
        { "GET", "object", "response-content-type=text%2Fplain", false, "GetObject" },
        { "HEAD", "bucket", nil, false, "HeadBucket" },
        { "HEAD", "object", nil, false, "HeadObject" },
        { "HEAD", "object", "versionId=1", false, "HeadObject" },
        { "PUT", "object", nil, false, "PutObject" },
        { "PUT", "object", "x-id=PutObject", false, "PutObject" },
        { "PUT", "object", nil, true, "CopyObject" },
        { "PUT", "object", "partNumber=1&uploadId=x", false, "UploadPart" },
        { "PUT", "object", "partNumber=1&uploadId=x", true, "UploadPartCopy" },
        { "PUT", "object", "uploadId=x", false, "PutObject" },
        { "PUT", "object", "tagging", false, "PutObjectMetadata" },
        { "PUT", "bucket", nil, false, "CreateBucket" },
        { "PUT", "bucket", "versioning", false, "PutBucketMetadata" },
        { "PUT", "bucket", "policy", false, "PutBucketMetadata" },
        { "POST", "object", "uploads", false, "CreateMultipartUpload" },
        { "POST", "object", "uploads=", false, "CreateMultipartUpload" },
        { "POST", "object", "uploadId=x", false, "CompleteMultipartUpload" },
        { "POST", "bucket", "delete", false, "DeleteObjects" },
        { "POST", "bucket", "delete=", false, "DeleteObjects" },
        { "POST", "object", "select&select-type=2", false, "SelectObjectContent" },
        { "POST", "object", "restore", false, "RestoreObject" },
        { "POST", "bucket", nil, false, "PostObject" },
        { "POST", "object", "myuploads=1", false, "PostObject" },
        { "DELETE", "object", nil, false, "DeleteObject" },
        { "DELETE", "object", "versionId=2", false, "DeleteObject" },
        { "DELETE", "object", "uploadId=x", false, "AbortMultipartUpload" },
        { "DELETE", "object", "xuploadId=x", false, "DeleteObject" },
        { "DELETE", "object", "tagging", false, "DeleteObjectMetadata" },
        { "DELETE", "bucket", nil, false, "DeleteBucket" },
        { "DELETE", "bucket", "cors", false, "DeleteBucketMetadata" },
        { "OPTIONS", "object", nil, false, "Options" },
        { "PATCH", "object", nil, false, "Patch" },
    }
    for _, c in ipairs(cases) do
        it(c[1] .. " " .. c[2] .. "?" .. tostring(c[3]) .. " -> " .. c[5], function()
            assert.are.equal(c[5], (s3.operation(c[1], c[2], c[3], c[4])))
        end)
    end
    it("gives every operation of the table a base cost", function()
        for _, c in ipairs(cases) do
            assert.is_number(cost.DEFAULT_BASE[c[5]], c[5])
        end
    end)
    it("refuses unknown methods", function()
        for _, m in ipairs({ "FOO", "PROPFIND", "TRACE", "CONNECT", "get" }) do
            local op, err = s3.operation(m, "object", nil, false)
            assert.is_nil(op)
            assert.are.equal("unsupported_method", err)
        end
    end)
    it("yields the same operation for both addressing styles", function()
        local domains = { "s3.localhost" }
        local function level(host, path)
            local b, k = s3.address(s3.vhost_bucket(host, domains), path)
            return b == nil and "service" or k == nil and "bucket" or "object"
        end
        for _, p in ipairs({ { "/bkt/k", "/k" }, { "/bkt", "/" }, { "/bkt/", "/" },
                             { "/bkt/a/b", "/a/b" } }) do
            for _, m in ipairs({ "GET", "HEAD", "PUT", "POST", "DELETE" }) do
                for _, q in ipairs({ "", "list-type=2", "acl", "uploads", "delete" }) do
                    assert.are.equal(
                        s3.operation(m, level("localhost", p[1]), q, false),
                        s3.operation(m, level("bkt.s3.localhost", p[2]), q, false),
                        m .. " " .. p[1] .. " " .. q)
                end
            end
        end
    end)
end)

describe("S3 error bodies", function()
    it("are S3's XML with escaped text", function()
        local x = s3.error_xml("SlowDown", "Please reduce your request rate.", "/b/<k>&", "req-1")
        assert.are.equal('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            .. "<Message>Please reduce your request rate.</Message><Resource>/b/&lt;k&gt;&amp;"
            .. "</Resource><RequestId>req-1</RequestId></Error>", x)
        local y = s3.error_xml("InvalidAccessKeyId", "no", "/", "r",
            { { "AWSAccessKeyId", "a\"b" } })
        assert.truthy(y:find("<AWSAccessKeyId>a&quot;b</AWSAccessKeyId>", 1, true))
    end)
    it("yield their code", function()
        assert.are.equal("SignatureDoesNotMatch", s3.error_code(
            '<?xml version="1.0"?><Error><Code>SignatureDoesNotMatch</Code><Message>x'))
        assert.is_nil(s3.error_code("<html>denied</html>"))
    end)
end)

describe("the raw request target", function()
    it("gives the path as sent: no dot-segment removal, no merged slashes, %XX kept", function()
        for target, want in pairs({
            ["/bkt/../k"] = "/bkt/../k", ["/bkt//k?x=1"] = "/bkt//k",
            ["/bkt/a%2Fb?uploads"] = "/bkt/a%2Fb",
            ["/bkt/k?"] = "/bkt/k", ["http://h:8080/bkt/k?a"] = "/bkt/k", ["http://h"] = "/",
            [""] = "/",
        }) do
            assert.are.equal(want, s3.raw_path(target), target)
        end
        -- the caller knows there is no query string: only a trailing "?" goes
        assert.are.equal("/bkt/k", s3.raw_path("/bkt/k?", false))
        assert.are.equal("/bkt/k", s3.raw_path("/bkt/k", false))
        assert.are.equal("/bkt/k", s3.raw_path("/bkt/k?list-type=2", true))
    end)
    it("splits bucket and key as S3 servers do, %XX-decoded", function()
        for path, want in pairs({
            ["/bkt/../k"] = { "bkt", "../k", "object" }, ["/bkt/.."] = { "bkt", "..", "object" },
            ["/bkt//k"] = { "bkt", "/k", "object" }, ["/bkt/a%2Fb"] = { "bkt", "a/b", "object" },
            ["/bkt/%2E%2E/k"] = { "bkt", "../k", "object" },
            ["/bkt/a;b=c"] = { "bkt", "a;b=c", "object" },
            ["/bkt/"] = { "bkt", nil, "bucket" }, ["/bkt"] = { "bkt", nil, "bucket" },
            ["/"] = { nil, nil, "service" },
        }) do
            local b, k = s3.address(nil, path)
            assert.are.equal(want[1], b, path)
            assert.are.equal(want[2], k, path)
            assert.are.equal(want[3], s3.level(nil, path), path)
        end
        local b, k = s3.address("vh", "/../k")
        assert.are.equal("vh", b)
        assert.are.equal("../k", k)
    end)
end)

describe("uploads of no announced size", function()
    it("are the PutObject and UploadPart bodies sent chunked without any length", function()
        local chunked = { ["transfer-encoding"] = "chunked" }
        assert.is_true(s3.length_required("PutObject", chunked))
        assert.is_true(s3.length_required("UploadPart", chunked))
        assert.is_true(s3.length_required("PutObject", { ["transfer-encoding"] = "chunked",
            ["x-amz-decoded-content-length"] = "abc" }))
    end)
    it("leave an aws-chunked body with its decoded length, a known length, other ops", function()
        assert.is_false(s3.length_required("PutObject", { ["transfer-encoding"] = "chunked",
            ["x-amz-decoded-content-length"] = "1024" }))
        assert.is_false(s3.length_required("UploadPart", { ["transfer-encoding"] = "chunked",
            ["x-amz-decoded-content-length"] = "0" }))
        assert.is_false(s3.length_required("PutObject", { ["content-length"] = "10" }))
        assert.is_false(s3.length_required("PutObject", {}))
        for _, op in ipairs({ "PostObject", "DeleteObjects", "CompleteMultipartUpload",
                              "CopyObject", "PutObjectMetadata", "CreateBucket" }) do
            assert.is_false(s3.length_required(op, { ["transfer-encoding"] = "chunked" }), op)
        end
    end)
end)
