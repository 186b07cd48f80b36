-- Signature verification: AWS's published SigV4 test suite (service "service", the header and
-- presigned forms), the examplebucket examples of S3's SigV4 documentation (GET Object with
-- Range, PUT Object, GET with a sub-resource, ListObjects, a presigned URL, the seed signature
-- of a streaming upload), and the SigV2 examples of S3's REST authentication documentation.
-- luacheck: ignore 631 (the vectors are long lines)
package.path = "lua/?.lua;" .. package.path
local crypto = require("tollgate.s3.sigcrypto")
local v4 = require("tollgate.s3.sigv4")
local v2 = require("tollgate.s3.sigv2")

local SUITE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
local S3_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
local SUITE_SCOPE = "20150830/us-east-1/service/aws4_request"
local SUITE_DATE = "20150830T123600Z"

-- method, raw path, raw query, headers, signed headers, payload hash -> signature
local function sign4(secret, scope_date, region, service, amz_date, method, path, query, headers,
                     signed, payload, skip)
    local ch = assert(v4.canonical_headers(signed, headers))
    local creq = v4.canonical_request(method, v4.canonical_uri(path),
        v4.canonical_query(v4.params(query), skip), ch, signed, payload)
    local scope = scope_date .. "/" .. region .. "/" .. service .. "/aws4_request"
    local sts = v4.string_to_sign(amz_date, scope, creq)
    return v4.signature(v4.signing_key(secret, scope_date, region, service), sts), creq, sts
end

local function suite(method, path, query, headers, signed, payload)
    headers.host = headers.host or "example.amazonaws.com"
    headers["x-amz-date"] = headers["x-amz-date"] or SUITE_DATE
    return sign4(SUITE_SECRET, "20150830", "us-east-1", "service", SUITE_DATE, method, path, query,
        headers, signed, payload or v4.EMPTY_SHA256)
end

describe("crypto", function()
    it("SHA-256, HMAC-SHA256 and HMAC-SHA1 match their published values", function()
        assert.equal(v4.EMPTY_SHA256, crypto.hex(crypto.sha256("")))
        assert.equal("f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8",
            crypto.hex(crypto.hmac_sha256("key", "The quick brown fox jumps over the lazy dog")))
        assert.equal("de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9",
            crypto.hex(crypto.hmac_sha1("key", "The quick brown fox jumps over the lazy dog")))
    end)
    it("a prepared HMAC key gives what HMAC() gives", function()
        for _, k in ipairs({ "key", string.rep("k", 32), string.rep("\255", 64) }) do
            for _, m in ipairs({ "", "The quick brown fox jumps over the lazy dog", string.rep("m", 300) }) do
                assert.equal(crypto.hex(crypto.hmac_sha256(k, m)),
                    crypto.hex(crypto.hmac_prepared(crypto.hmac_prepare(k), m)))
            end
        end
        assert.equal("d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592",
            crypto.hex(crypto.sha256("The quick brown fox jumps over the lazy dog")))
    end)
    it("base64 round-trips and refuses what is not base64", function()
        for _, s in ipairs({ "", "f", "fo", "foo", "foob", "fooba", "foobar", "\0\255\128" }) do
            assert.equal(s, crypto.unb64(crypto.b64(s)))
        end
        assert.equal("Zm9vYmE=", crypto.b64("fooba"))
        for _, s in ipairs({ "Zm9", "Zm=v", "Z===", "Zm9v!A==", "Zg==Zg==" }) do
            assert.is_nil(crypto.unb64(s), s)
        end
    end)
    it("AES-256-GCM opens what Go's crypto/aes sealed, and nothing tampered with", function()
        -- sealed by the control plane's secrets package (key 32 x 0x01, nonce 12 x 0x02,
        -- additional data "AKIDEXAMPLE")
        local key = string.rep("\1", 32)
        local iv = string.rep("\2", 12)
        local sealed = crypto.unb64("cJyoJTgPlIm9ivmFFYiJhe/xlKGsmu8hpdWGkjuiMSc2Mk57KCTmtmRppsIJxwajAWwDWlCkia4=")
        local ct, tag = sealed:sub(1, -17), sealed:sub(-16)
        assert.equal("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", crypto.aes_gcm_open(key, iv, ct, tag, "AKIDEXAMPLE"))
        assert.is_nil(crypto.aes_gcm_open(key, iv, ct, tag, "AKIDOTHER"))
        assert.is_nil(crypto.aes_gcm_open(string.rep("\3", 32), iv, ct, tag, "AKIDEXAMPLE"))
        local bad = string.char((ct:byte(1) + 1) % 256) .. ct:sub(2)
        assert.is_nil(crypto.aes_gcm_open(key, iv, bad, tag, "AKIDEXAMPLE"))
    end)
end)

describe("aws-sig-v4-test-suite, header form", function()
    local cases = {
        { "get-vanilla", "GET", "/", "", {}, "host;x-amz-date",
          "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
        { "get-vanilla-query-order-key-case", "GET", "/", "Param2=value2&Param1=value1", {},
          "host;x-amz-date", "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500" },
        { "get-vanilla-query-unreserved", "GET", "/",
          "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
          .. "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", {},
          "host;x-amz-date", "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197" },
        { "get-vanilla-utf8-query", "GET", "/", "\225\136\180=bar", {}, "host;x-amz-date",
          "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04" },
        { "get-header-key-duplicate", "GET", "/", "", { ["my-header1"] = { "value2", "value2", "value1" } },
          "host;my-header1;x-amz-date", "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea" },
        { "get-header-value-order", "GET", "/", "",
          { ["my-header1"] = { "value4", "value1", "value3", "value2" } },
          "host;my-header1;x-amz-date", "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01" },
        { "get-header-value-trim", "GET", "/", "",
          { ["my-header1"] = " value1", ["my-header2"] = ' "a   b   c"' },
          "host;my-header1;my-header2;x-amz-date",
          "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736" },
        { "get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
          "", {}, "host;x-amz-date", "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f" },
        { "get-utf8", "GET", "/\225\136\180", "", {}, "host;x-amz-date",
          "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85" },
        { "get-utf8 (percent-encoded on the wire)", "GET", "/%E1%88%B4", "", {}, "host;x-amz-date",
          "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85" },
        { "get-space-unnormalized", "GET", "/example%20space/", "", {}, "host;x-amz-date",
          "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741" },
        { "get-slashes-unnormalized", "GET", "//example//", "", {}, "host;x-amz-date",
          "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5" },
        { "get-relative-unnormalized", "GET", "/example/..", "", {}, "host;x-amz-date",
          "eca7ead57bb5aa5c8e28007acd4ff04e1ff9a0ff3b237ec1554a184887ff9282" },
        { "post-vanilla", "POST", "/", "", {}, "host;x-amz-date",
          "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b" },
        { "post-vanilla-query", "POST", "/", "Param1=value1", {}, "host;x-amz-date",
          "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11" },
        { "post-header-key-sort", "POST", "/", "", { ["my-header1"] = "value1" },
          "host;my-header1;x-amz-date", "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c" },
    }
    for _, c in ipairs(cases) do
        it(c[1], function()
            local sig = suite(c[2], c[3], c[4], c[5], c[6])
            assert.equal(c[7], sig)
        end)
    end
    it("post-x-www-form-urlencoded: the body's hash from x-amz-content-sha256", function()
        local body = "Param1=value1"
        local ph = crypto.hex(crypto.sha256(body))
        assert.equal("9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e", ph)
        local h = { ["content-type"] = "application/x-www-form-urlencoded", ["content-length"] = "13",
                    ["x-amz-content-sha256"] = ph }
        local sig, creq, sts = suite("POST", "/", "", h,
            "content-length;content-type;host;x-amz-content-sha256;x-amz-date", ph)
        assert.equal("POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\n"
            .. "host:example.amazonaws.com\nx-amz-content-sha256:" .. ph .. "\nx-amz-date:"
            .. SUITE_DATE .. "\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
            .. ph, creq)
        assert.equal("AWS4-HMAC-SHA256\n20150830T123600Z\n" .. SUITE_SCOPE
            .. "\nb1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb", sts)
        assert.equal("d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b", sig)
        h["content-type"] = "application/x-www-form-urlencoded; charset=utf-8"
        assert.equal("328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422",
            (suite("POST", "/", "", h,
                "content-length;content-type;host;x-amz-content-sha256;x-amz-date", ph)))
    end)
    it("one changed byte anywhere changes the signature", function()
        local base = suite("GET", "/", "Param2=value2&Param1=value1", {}, "host;x-amz-date")
        assert.not_equal(base, suite("GET", "/", "Param2=value2&Param1=value3", {}, "host;x-amz-date"))
        assert.not_equal(base, suite("HEAD", "/", "Param2=value2&Param1=value1", {}, "host;x-amz-date"))
        assert.not_equal(base, suite("GET", "/x", "Param2=value2&Param1=value1", {}, "host;x-amz-date"))
        assert.not_equal(base, suite("GET", "/", "Param2=value2&Param1=value1",
            { host = "evil.example.com" }, "host;x-amz-date"))
    end)
end)

describe("aws-sig-v4-test-suite, presigned form", function()
    local cred = "&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2F"
        .. "us-east-1%2Fservice%2Faws4_request&X-Amz-Date=20150830T123600Z&X-Amz-Expires=3600"
    local function presigned(method, query, headers, signed, payload)
        local q = query .. cred .. "&X-Amz-SignedHeaders=" .. v4.encode(signed, false)
            .. "&X-Amz-Signature=00"
        headers.host = "example.amazonaws.com"
        return sign4(SUITE_SECRET, "20150830", "us-east-1", "service", SUITE_DATE, method, "/",
            q, headers, signed, payload or v4.EMPTY_SHA256, "X-Amz-Signature")
    end
    it("get-vanilla", function()
        assert.equal("e93c787ed7f371d5c6b165c1b38ede9550f4dce4144713e844b25b7192d3865d",
            presigned("GET", "", {}, "host"))
    end)
    it("get-vanilla-query-order-key-case", function()
        assert.equal("86012e2c9ad4d77369f5d81c11f75158aae4f895a085212cc6d3f923d300bed5",
            presigned("GET", "Param2=value2&Param1=value1", {}, "host"))
    end)
    it("post-x-www-form-urlencoded", function()
        assert.equal("89a40deed0f26f9461242825a082d2222717248abc7ab41f552ad84a94ad46e9",
            presigned("POST", "", { ["content-type"] = "application/x-www-form-urlencoded",
                ["content-length"] = "13" }, "content-length;content-type;host",
                "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"))
    end)
end)

describe("S3's SigV4 examples (examplebucket)", function()
    local function s3sign(method, path, query, headers, signed, skip, date)
        headers.host = headers.host or "examplebucket.s3.amazonaws.com"
        return sign4(S3_SECRET, "20130524", "us-east-1", "s3", date or "20130524T000000Z", method,
            path, query, headers, signed, headers["x-amz-content-sha256"] or v4.UNSIGNED, skip)
    end
    it("GET Object with a Range", function()
        assert.equal("f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
            s3sign("GET", "/test.txt", "", { range = "bytes=0-9",
                ["x-amz-content-sha256"] = v4.EMPTY_SHA256, ["x-amz-date"] = "20130524T000000Z" },
                "host;range;x-amz-content-sha256;x-amz-date"))
    end)
    it("PUT Object: '$' in the key is encoded once", function()
        assert.equal("98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
            s3sign("PUT", "/test$file.text", "", { date = "Fri, 24 May 2013 00:00:00 GMT",
                ["x-amz-storage-class"] = "REDUCED_REDUNDANCY", ["x-amz-date"] = "20130524T000000Z",
                ["x-amz-content-sha256"] = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072" },
                "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class"))
        -- the same key percent-encoded on the wire signs the same
        assert.equal("98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
            s3sign("PUT", "/test%24file.text", "", { date = "Fri, 24 May 2013 00:00:00 GMT",
                ["x-amz-storage-class"] = "REDUCED_REDUNDANCY", ["x-amz-date"] = "20130524T000000Z",
                ["x-amz-content-sha256"] = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072" },
                "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class"))
    end)
    it("GET Bucket lifecycle: a sub-resource without a value signs as 'lifecycle='", function()
        assert.equal("fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
            s3sign("GET", "/", "lifecycle", { ["x-amz-date"] = "20130524T000000Z",
                ["x-amz-content-sha256"] = v4.EMPTY_SHA256 }, "host;x-amz-content-sha256;x-amz-date"))
    end)
    it("GET Bucket (ListObjects) with a sorted query", function()
        assert.equal("34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
            s3sign("GET", "/", "max-keys=2&prefix=J", { ["x-amz-date"] = "20130524T000000Z",
                ["x-amz-content-sha256"] = v4.EMPTY_SHA256 }, "host;x-amz-content-sha256;x-amz-date"))
    end)
    it("a presigned URL (UNSIGNED-PAYLOAD, X-Amz-Signature left out)", function()
        local q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524"
            .. "%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400"
            .. "&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        assert.equal("aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
            s3sign("GET", "/test.txt", q, {}, "host", "X-Amz-Signature"))
    end)
    it("the seed signature of a streaming upload (STREAMING-AWS4-HMAC-SHA256-PAYLOAD)", function()
        assert.equal("4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            s3sign("PUT", "/examplebucket/chunkObject.txt", "", { host = "s3.amazonaws.com",
                ["x-amz-date"] = "20130524T000000Z", ["x-amz-storage-class"] = "REDUCED_REDUNDANCY",
                ["content-encoding"] = "aws-chunked", ["x-amz-decoded-content-length"] = "66560",
                ["content-length"] = "66824",
                ["x-amz-content-sha256"] = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" },
                "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                .. "x-amz-decoded-content-length;x-amz-storage-class"))
    end)
end)

describe("SigV4 parsing", function()
    it("reads the Authorization header", function()
        local a = assert(v4.parse_header("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
            .. "us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-date, Signature="
            .. "FE5F80F77D5FA3BECA038A248FF027D0445342FE2855DDC963176630326F1024"))
        assert.same({ "AKIAIOSFODNN7EXAMPLE", "20130524", "us-east-1", "s3", "host;range;x-amz-date",
            "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024",
            "20130524/us-east-1/s3/aws4_request" },
            { a.akid, a.date, a.region, a.service, a.signed, a.signature, a.scope })
    end)
    it("refuses malformed and ambiguous headers", function()
        local sig = string.rep("a", 64)
        for _, h in ipairs({
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host",
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, Signature=" .. sig,
            "AWS4-HMAC-SHA256 Credential=AK/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" .. sig,
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws5_request, SignedHeaders=host, Signature=" .. sig,
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" .. sig
                .. ", Signature=" .. sig,
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, Credential=B/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" .. sig,
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=zz" .. sig:sub(3),
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" .. sig .. "00",
        }) do
            assert.is_nil(v4.parse_header(h), h)
        end
    end)
    it("checks that SignedHeaders is lower-case, sorted and unique", function()
        assert.is_nil(v4.canonical_headers("x-amz-date;host", {}))
        assert.is_nil(v4.canonical_headers("Host;x-amz-date", {}))
        assert.is_nil(v4.canonical_headers("host;host", {}))
        assert.equal("host:h\nx-amz-date:d\n", v4.canonical_headers("host;x-amz-date",
            { host = "h", ["x-amz-date"] = "d" }))
    end)
    it("decodes query names and values as S3 servers do, and sorts them by name then value", function()
        assert.equal("X-Amz-Credential=a%2Fb&a=1&a-b=2&a-b=3&b=%20%2B",
            v4.canonical_query(v4.params("a-b=3&X-Amz-%43redential=a/b&b=+%2B&a=1&&a-b=2")))
    end)
    it("parses times", function()
        assert.equal(1369353600, v4.parse_amz_date("20130524T000000Z"))
        assert.equal(1175024202, v4.parse_http_date("Tue, 27 Mar 2007 19:36:42 +0000"))
        assert.equal(1175024202, v4.parse_http_date("Tue, 27 Mar 2007 19:36:42 GMT"))
        assert.equal(951782400, v4.parse_amz_date("20000229T000000Z"))
        assert.is_nil(v4.parse_amz_date("20130524T000000"))
        assert.is_nil(v4.parse_amz_date("20131324T000000Z"))
        assert.is_nil(v4.parse_http_date("Tue, 27 Mar 2007 19:36:42 +0200"))
    end)
end)

describe("S3's SigV2 examples", function()
    local function sts(method, headers, path, query, vbucket, date)
        return v2.string_to_sign(method, headers, path, v4.params(query), vbucket, date)
    end
    it("GET Object (virtual-hosted)", function()
        local s = sts("GET", { date = "Tue, 27 Mar 2007 19:36:42 +0000" }, "/photos/puppy.jpg", "",
            "johnsmith", "Tue, 27 Mar 2007 19:36:42 +0000")
        assert.equal("GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/johnsmith/photos/puppy.jpg", s)
        assert.equal("bWq2s1WEIj+Ydj0vQ697zp+IXMU=", v2.signature(S3_SECRET, s))
    end)
    it("PUT Object (path style, Content-Type)", function()
        local s = sts("PUT", { ["content-type"] = "image/jpeg", ["content-length"] = "94328" },
            "/johnsmith/photos/puppy.jpg", "", nil, "Tue, 27 Mar 2007 21:15:45 +0000")
        assert.equal("PUT\n\nimage/jpeg\nTue, 27 Mar 2007 21:15:45 +0000\n/johnsmith/photos/puppy.jpg", s)
        assert.equal("MyyxeRY7whkBe+bq8fHCL/2kKUg=", v2.signature(S3_SECRET, s))
    end)
    it("DELETE with x-amz-date: an empty Date line, the x-amz header signed", function()
        local s = sts("DELETE", { ["x-amz-date"] = "Tue, 27 Mar 2007 21:20:26 +0000" },
            "/johnsmith/photos/puppy.jpg", "", nil, "")
        assert.equal("DELETE\n\n\n\nx-amz-date:Tue, 27 Mar 2007 21:20:26 +0000\n/johnsmith/photos/puppy.jpg", s)
        assert.equal("R4dJ53KECjStyBO5iTBJZ4XVOaI=", v2.signature(S3_SECRET, s))
    end)
    it("GET ?acl: the sub-resource belongs to the resource, other parameters do not", function()
        local s = sts("GET", {}, "/", "acl&foo=bar", "johnsmith", "Tue, 27 Mar 2007 19:44:46 +0000")
        assert.equal("GET\n\n\nTue, 27 Mar 2007 19:44:46 +0000\n/johnsmith/?acl", s)
        assert.equal("c2WLPFtWHVgbEmeEG93a4cG37dM=", v2.signature(S3_SECRET, s))
    end)
    it("a presigned URL (Expires as the date)", function()
        local s = sts("GET", {}, "/photos/puppy.jpg",
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&Signature=x", "johnsmith",
            "1175139620")
        assert.equal("GET\n\n\n1175139620\n/johnsmith/photos/puppy.jpg", s)
        assert.equal("NpgCjnDzrM+WFzoENXmpNDUsSn8=", v2.signature(S3_SECRET, s))
    end)
    it("parses the Authorization header", function()
        assert.same({ "AKIAIOSFODNN7EXAMPLE", "bWq2s1WEIj+Ydj0vQ697zp+IXMU=" },
            { v2.parse_header("AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU=") })
        assert.same({ "ceph:user", "sig=" }, { v2.parse_header("AWS ceph:user:sig=") })
        assert.is_nil(v2.parse_header("AWS nosig"))
        assert.is_nil(v2.parse_header("AWS :sig"))
        assert.is_nil(v2.parse_header("AWS key:"))
    end)
end)
