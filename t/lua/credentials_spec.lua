-- One reading of credentials, the backend's: decoded parameter names and values, and a refusal
-- (an error reason) for every request whose credentials could be read as two key ids.
package.path = "lua/?.lua;" .. package.path
local cred = require("tollgate.s3.credentials")

local V4 = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=%s%%2F20260101%%2Fus-east-1%%2Fs3"
    .. "%%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
    .. "&X-Amz-Signature=abcd"
local function v4(key) return V4:format(key) end
local function v2(key) return "AWSAccessKeyId=" .. key .. "&Expires=1900000000&Signature=sig%3D" end

describe("query credentials", function()
    it("read one credential, names and values decoded", function()
        assert.are.same({ "ATTACKER", "presigned-v4" }, { cred.from_query(v4("ATTACKER")) })
        assert.are.same({ "ATTACKER", "presigned-v2" }, { cred.from_query(v2("ATTACKER")) })
        -- the name percent-encoded is the same parameter to every S3 server
        assert.are.same({ "VICTIM", "presigned-v4" },
            { cred.from_query("X-Amz-%43redential=VICTIM%2F20260101%2Fr%2Fs3%2Faws4_request") })
        assert.are.same({ "VICTIM", "presigned-v2" },
            { cred.from_query("%41%57%53AccessKeyId=VICTIM&Signature=x") })
        -- the value decoded before its '/' is looked for
        assert.are.same({ "VICTIM", "presigned-v4" },
            { cred.from_query("X-Amz-Credential=VIC%54IM%2fd%2fr%2fs3%2faws4_request") })
        assert.are.same({ "my key", "presigned-v2" }, { cred.from_query("AWSAccessKeyId=my+key") })
        assert.is_nil(cred.from_query("prefix=a&max-keys=2&list-type=2"))
        assert.is_nil(cred.from_query("xAWSAccessKeyId=nope&AWSAccessKeyIdx=nope"))
        assert.is_nil(cred.from_query(""))
        assert.is_nil(cred.from_query(nil))
    end)
    it("accept the same key twice (one app either way)", function()
        assert.are.same({ "SAME", "presigned-v2" },
            { cred.from_query(v2("SAME") .. "&" .. v4("SAME")) })
        assert.are.same({ "SAME", "presigned-v2" },
            { cred.from_query("AWSAccessKeyId=SAME&AWSAccessKeyId=SAME") })
    end)
    -- the attacks of the threat model and their variants: each could be read as two keys
    local ambiguous = {
        { "attacker's V2 presign + X-Amz-Credential=<victim>", v2("ATTACKER")
            .. "&X-Amz-Credential=VICTIM%2F20260101%2Fus-east-1%2Fs3%2Faws4_request" },
        { "V4 presign with X-Amz-%43redential=<attacker> + AWSAccessKeyId=<victim>",
            (v4("ATTACKER"):gsub("X%-Amz%-Credential", "X-Amz-%%43redential"))
            .. "&AWSAccessKeyId=VICTIM" },
        { "V4 presign + %41WSAccessKeyId=<victim>", v4("ATTACKER") .. "&%41WSAccessKeyId=VICTIM" },
        { "repeated AWSAccessKeyId", "AWSAccessKeyId=ATTACKER&Signature=x&AWSAccessKeyId=VICTIM" },
        { "repeated X-Amz-Credential",
          v4("ATTACKER") .. "&X-Amz-Credential=VICTIM/d/r/s3/aws4_request" },
        { "lower-case name alone", "x-amz-credential=VICTIM%2Fd%2Fr%2Fs3%2Faws4_request" },
        { "lower-case hex escape", "X-Amz-%63redential=VICTIM%2Fd%2Fr%2Fs3%2Faws4_request" },
        { "lower-case v2 name", v4("ATTACKER") .. "&awsaccesskeyid=VICTIM" },
        { "underscores", "X_Amz_Credential=VICTIM/d/r/s3/aws4_request" },
        { "trailing space (+)", "X-Amz-Credential+=VICTIM/d/r/s3/aws4_request" },
        { "trailing %20", v2("ATTACKER") .. "&AWSAccessKeyId%20=VICTIM" },
        { "NUL in the name", v2("ATTACKER") .. "&AWS%00AccessKeyId=VICTIM" },
        { "after a ';' in a value", "prefix=a;AWSAccessKeyId=VICTIM&" .. v4("ATTACKER") },
        { "after a ';' in a name", "x;X-Amz-Credential=VICTIM/d/r/s3/aws4_request" },
    }
    for _, c in ipairs(ambiguous) do
        it("refuses " .. c[1], function()
            assert.are.same({ nil, nil, "ambiguous_credentials" }, { cred.from_query(c[2]) })
        end)
    end
    it("refuses a V4 credential without '/'", function()
        assert.are.same({ nil, nil, "malformed_credentials" },
            { cred.from_query("X-Amz-Credential=VICTIM&X-Amz-Signature=x") })
    end)
    it("leaves a ';' that names no credential alone", function()
        assert.are.same({ "K", "presigned-v2" }, { cred.from_query("prefix=a;b&AWSAccessKeyId=K") })
    end)
end)

describe("authorization header", function()
    local H = "AWS4-HMAC-SHA256 Credential=%s/20260101/us-east-1/s3/aws4_request, "
        .. "SignedHeaders=host;x-amz-date, Signature=abcd"
    it("reads V4, V4a and V2", function()
        assert.are.same({ "AKIA1", "v4" }, { cred.from_authorization(H:format("AKIA1")) })
        assert.are.same({ "AKIA1", "v4" }, { cred.from_authorization(
            "AWS4-HMAC-SHA256 Credential=AKIA1/20260101/us-east-1/s3/aws4_request,"
            .. "SignedHeaders=host,Signature=abcd") })
        assert.are.same({ "AKIDV4A", "v4" }, { cred.from_authorization(
            "AWS4-ECDSA-P256-SHA256 Credential=AKIDV4A/20260101/s3/aws4_request, Signature=x") })
        assert.are.same({ "ceph:user", "v2" }, { cred.from_authorization("AWS ceph:user:sig=") })
        assert.is_nil(cred.from_authorization("Bearer abc"))
        assert.is_nil(cred.from_authorization(nil))
    end)
    local bad = {
        { "two Credential fields",
          H:format("ATTACKER") .. ", Credential=VICTIM/d/r/s3/aws4_request",
          "ambiguous_credentials" },
        { "a Credential= inside another field", "AWS4-HMAC-SHA256 Credential=ATTACKER/d/r/s3/"
            .. "aws4_request, SignedHeaders=host;Credential=VICTIM/x, Signature=ab",
          "ambiguous_credentials" },
        { "credential in lower case", "AWS4-HMAC-SHA256 credential=VICTIM/d/r/s3/aws4_request, "
            .. "SignedHeaders=host, Signature=ab", "ambiguous_credentials" },
        { "a space before '='", "AWS4-HMAC-SHA256 Credential =VICTIM/d/r/s3/aws4_request, "
            .. "SignedHeaders=host, Signature=ab", "ambiguous_credentials" },
        { "no Credential", "AWS4-HMAC-SHA256 SignedHeaders=host", "malformed_credentials" },
        { "no '/'", "AWS4-HMAC-SHA256 Credential=VICTIM, Signature=ab", "malformed_credentials" },
        { "no fields", "AWS4-HMAC-SHA256", "malformed_credentials" },
        { "V2 without ':'", "AWS nocolon", "malformed_credentials" },
    }
    for _, c in ipairs(bad) do
        it("refuses " .. c[1], function()
            assert.are.same({ nil, nil, c[3] }, { cred.from_authorization(c[2]) })
        end)
    end
end)

describe("POST form fields", function()
    local b = "----Boundary7MA4YWxk"
    local function form(fields)
        local parts = {}
        for _, f in ipairs(fields) do
            parts[#parts + 1] = "--" .. b .. '\r\nContent-Disposition: form-data; name="'
                .. f[1] .. '"\r\n\r\n' .. f[2] .. "\r\n"
        end
        return table.concat(parts) .. "--" .. b .. "--\r\n"
    end
    local CRED = "/20260101/us-east-1/s3/aws4_request"
    it("reads field names in any case", function()
        assert.are.same({ "K1", "post-v4" },
            { cred.from_form(form({ { "x-amz-credential", "K1" .. CRED }, { "file", "x" } }), b) })
        assert.are.same({ "K2", "post-v2" },
            { cred.from_form(form({ { "awsAccessKeyID", "K2" }, { "file", "x" } }), b) })
        -- filename="X-Amz-Credential" is not the field's name
        local tricky = "--" .. b
            .. '\r\nContent-Disposition: form-data; filename="x-amz-credential";'
            .. ' name="key"\r\n\r\nVICTIM' .. CRED .. "\r\n" .. form({ { "AWSAccessKeyId", "K3" },
            { "file", "x" } })
        assert.are.same({ "K3", "post-v2" }, { cred.from_form(tricky, b) })
    end)
    it("refuses two credential fields naming different keys", function()
        assert.are.same({ nil, nil, "ambiguous_credentials" }, { cred.from_form(form({
            { "AWSAccessKeyId", "ATTACKER" }, { "X-Amz-Credential", "VICTIM" .. CRED },
            { "file", "x" } }), b) })
        assert.are.same({ nil, nil, "ambiguous_credentials" }, { cred.from_form(form({
            { "X-Amz-Credential", "ATTACKER" .. CRED }, { "X-Amz-Credential", "VICTIM" .. CRED },
            { "file", "x" } }), b) })
        assert.are.same({ nil, nil, "ambiguous_credentials" }, { cred.from_form(form({
            { "X_Amz_Credential", "VICTIM" .. CRED }, { "file", "x" } }), b) })
        assert.are.same({ "SAME", "post-v2" }, { cred.from_form(form({
            { "AWSAccessKeyId", "SAME" }, { "X-Amz-Credential", "SAME" .. CRED },
            { "file", "x" } }), b) })
    end)
    it("refuses fields before the file longer than what is read", function()
        local body = form({ { "key", string.rep("p", 200) }, { "AWSAccessKeyId", "K" },
                            { "file", "x" } })
        assert.are.same({ nil, nil, "post_fields_too_large" },
            { cred.from_form(body:sub(1, 150), b, true) })
        assert.is_nil((cred.from_form(body:sub(1, 150), b, false)))
    end)
end)
