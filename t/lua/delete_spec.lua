-- DeleteObjects bodies counted as the backend counts them: the <Object> children of <Delete>,
-- whatever whitespace, attributes, prefixes, comments, CDATA or processing instructions the body
-- holds; aws-chunked bodies de-chunked; what is not well-formed refused. A property test checks
-- random bodies against the count they were built with and, where python3 is installed, against
-- its XML parser (expat) over the same bodies.
package.path = "lua/?.lua;" .. package.path
local del = require("tollgate.s3.delete")

local function objects(n, fmt)
    local t = {}
    for i = 1, n do
        t[i] = (fmt or "<Object><Key>k%d</Key></Object>"):format(i)
    end
    return table.concat(t)
end

describe("DeleteObjects key count", function()
    it("counts the Object children of Delete", function()
        assert.are.equal(3, del.count("<Delete>" .. objects(3) .. "</Delete>"))
        assert.are.equal(2, del.count('<?xml version="1.0" encoding="UTF-8"?>\n<Delete xmlns='
            .. '"http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>' .. objects(2)
            .. "</Delete>\n"))
        assert.are.equal(0, del.count("<Delete></Delete>"))
        assert.are.equal(1, del.count("\239\187\191<Delete><Object/></Delete>"))
    end)
    it("counts the under-payment attacks right", function()
        -- whitespace in the tag: 100 keys, not 0
        assert.are.equal(100, del.count("<Delete>"
            .. objects(100, "<Object ><Key>k%d</Key></Object >")
            .. "</Delete>"))
        assert.are.equal(100, del.count("<Delete>"
            .. objects(100, "<Object\n\t><Key>k%d</Key></Object>")
            .. "</Delete>"))
        -- attributes (a quoted '>' inside), prefixes, self-closing
        assert.are.equal(100, del.count('<s3:Delete xmlns:s3="urn:x">'
            .. objects(100, '<s3:Object a="x>y" b=\'/\'><s3:Key>k%d</s3:Key></s3:Object>')
            .. "</s3:Delete>"))
        -- padding first (whitespace, comments): still every key
        assert.are.equal(100, del.count("<Delete>" .. string.rep(" ", 100000) .. "<!-- "
            .. string.rep("x", 1000) .. " -->" .. objects(100) .. "</Delete>"))
    end)
    it("does not count what is not an Object child of Delete", function()
        assert.are.equal(1, del.count("<Delete><!-- <Object><Key>a</Key></Object> -->"
            .. "<Object><Key><![CDATA[<Object>]]></Key></Object>"
            .. "<?pi <Object> ?><Other><Object/></Other></Delete>"))
        assert.are.equal(2, del.count("<Delete><Object><Object/></Object><Object/></Delete>"))
        assert.are.equal(0, del.count("<Delete><Objects/><ObjectX/><xObject/></Delete>"))
    end)
    local malformed = {
        { "no root", "" },
        { "another root", "<Remove><Object/></Remove>" },
        { "two roots", "<Delete/><Delete/>" },
        { "unclosed", "<Delete><Object>" },
        { "mismatched end tag", "<Delete><Object></Key></Delete>" },
        { "text outside", "junk<Delete/>" },
        { "space after <", "<Delete>< Object/></Delete>" },
        { "a DTD", '<!DOCTYPE d [<!ENTITY e "x">]><Delete/>' },
        { "unterminated comment", "<Delete><!-- </Delete>" },
        { "attribute without value", "<Delete><Object a></Object></Delete>" },
        { "attribute without space", '<Delete><Object a="1"b="2"/></Delete>' },
        { "'<' in an attribute", '<Delete><Object a="<"/></Delete>' },
        { "over 1000 keys", "<Delete>" .. objects(1001) .. "</Delete>" },
        { "too deep", "<Delete>" .. string.rep("<a>", 40) .. string.rep("</a>", 40)
            .. "</Delete>" },
        { "not a string", nil },
    }
    for _, c in ipairs(malformed) do
        it("refuses " .. c[1], function()
            assert.are.same({ nil, "malformed_xml" }, { del.count(c[2]) })
        end)
    end
    it("takes 1000 keys", function()
        assert.are.equal(1000, del.count("<Delete>" .. objects(1000) .. "</Delete>"))
    end)
end)

describe("aws-chunked bodies", function()
    local function chunked(s, size)
        local out = {}
        for i = 1, #s, size do
            local c = s:sub(i, i + size - 1)
            out[#out + 1] = ("%x;chunk-signature=%s\r\n%s\r\n"):format(#c, string.rep("a", 64), c)
        end
        out[#out + 1] = "0;chunk-signature=" .. string.rep("b", 64) .. "\r\n\r\n"
        return table.concat(out)
    end
    it("de-chunk to the payload", function()
        local doc = "<Delete>" .. objects(100, "<Object ><Key>k%d</Key></Object>") .. "</Delete>"
        local body = chunked(doc, 37)
        assert.are.equal(doc, del.dechunk(body))
        assert.are.equal(100, del.count(del.dechunk(body)))
        -- unsigned chunks with trailers
        assert.are.equal("abc", del.dechunk("3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n"))
    end)
    it("refuse broken framing", function()
        for _, b in ipairs({ "zz\r\nabc\r\n0\r\n\r\n", "5\r\nabc\r\n0\r\n\r\n", "3\r\nabc",
                             "<Delete/>", "3\r\nabcXX0\r\n\r\n" }) do
            assert.are.same({ nil, "malformed_xml" }, { del.dechunk(b) })
        end
    end)
end)

-- random documents whose key count is known by construction
local function random_doc(rnd)
    local function ws()
        local t = { "", " ", "\n", "\t", "  \r\n " }
        return t[rnd(#t)]
    end
    local function prefix()
        local t = { "", "", "s3:", "a:" }
        return t[rnd(#t)]
    end
    local function attrs()
        local t = { "", ' a="1"', " b='x>y'", ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"',
                    ' c = "/"' }
        return t[rnd(#t)]
    end
    local function noise()
        local t = { "", "<!-- <Object><Key>n</Key></Object> -->", "<?pi <Object/> ?>",
                    "<Quiet>true</Quiet>", "<Other><Object/></Other>", ws() }
        return t[rnd(#t)]
    end
    local function key()
        local t = { "k", "<![CDATA[<Object>]]>", "a&amp;b", "x > y", "" }
        return t[rnd(#t)]
    end
    local n = rnd(60) - 1
    local p = prefix()
    local parts = { rnd(2) == 1 and '<?xml version="1.0"?>' or "", ws(), "<", p, "Delete",
                    ' xmlns:s3="urn:s3" xmlns:a="urn:a"', ">" }
    for _ = 1, n do
        local op = prefix()
        parts[#parts + 1] = noise()
        if rnd(4) == 1 then
            parts[#parts + 1] = "<" .. op .. "Object" .. attrs() .. ws() .. "/>"
        else
            parts[#parts + 1] = "<" .. op .. "Object" .. attrs() .. ws() .. "><Key" .. ws() .. ">"
                .. key() .. "</Key" .. ws() .. ">"
                .. (rnd(3) == 1 and "<VersionId>v</VersionId>" or "")
                .. "</" .. op .. "Object" .. ws() .. ">"
        end
    end
    parts[#parts + 1] = noise() .. "</" .. p .. "Delete>" .. ws()
    return table.concat(parts), n
end

describe("property: random bodies", function()
    math.randomseed(26)
    local rnd = math.random
    local docs = {}
    for i = 1, 300 do
        local doc, n = random_doc(rnd)
        docs[i] = { doc, n }
    end
    it("count what they were built with", function()
        for i = 1, #docs do
            assert.are.equal(docs[i][2], del.count(docs[i][1]), docs[i][1])
        end
    end)
    it("count what python's XML parser counts", function()
        local py = io.popen("command -v python3"):read("*l")
        if not py then
            pending("python3 is not installed")
            return
        end
        local dir = os.tmpname()
        local f = assert(io.open(dir, "wb"))
        for i = 1, #docs do
            f:write(docs[i][1], "\0")
        end
        f:close()
        local script = [[
import sys, xml.etree.ElementTree as ET
for d in open(sys.argv[1], 'rb').read().split(b'\0')[:-1]:
    r = ET.fromstring(d)
    print(sum(1 for c in r if c.tag.rsplit('}', 1)[-1] == 'Object'))
]]
        local sf = os.tmpname()
        local w = assert(io.open(sf, "wb"))
        w:write(script)
        w:close()
        local out = io.popen("python3 " .. sf .. " " .. dir)
        local i = 0
        for line in out:lines() do
            i = i + 1
            assert.are.equal(tonumber(line), del.count(docs[i][1]), docs[i][1])
        end
        out:close()
        os.remove(dir)
        os.remove(sf)
        assert.are.equal(#docs, i)
    end)
end)
