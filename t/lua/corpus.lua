-- The conformance corpus of testdata/rules and testdata/breakers (testdata/README.md), read for
-- the busted specs of the gateway's parsers.
local cjson = require("cjson.safe")

local _M = {}

--- The cases of testdata/<name> (e.g. "rules/invalid.json").
function _M.load(name)
    local f = assert(io.open("testdata/" .. name, "r"))
    local text = f:read("*a")
    f:close()
    local cases = assert(cjson.decode(text), name)
    assert(#cases > 0, name .. " holds no case")
    return cases
end

--- The JSON text of a decoded case (cjson prints 14 significant digits: the corpus' numbers
-- have at most 13).
function _M.encode(v)
    return assert(cjson.encode(v))
end

return _M
