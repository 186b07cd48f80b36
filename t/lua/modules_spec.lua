-- The gateway's module graph: every require of a tollgate module (at the top or inside a
-- function) names a module of lua/tollgate, and no module reaches itself through requires.
package.path = "lua/?.lua;" .. package.path

local function modules()
    local out = {}
    local p = io.popen("find lua/tollgate -name '*.lua' | sort")
    for path in p:lines() do
        local f = assert(io.open(path))
        local text = f:read("*a")
        f:close()
        local name = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/", ".")
        local deps = {}
        for dep in text:gmatch("require%(?%s*[\"'](tollgate%.[%w_%.]+)[\"']") do
            deps[#deps + 1] = dep
        end
        out[name] = deps
    end
    p:close()
    return out
end

describe("the gateway's modules", function()
    local graph = modules()

    it("are found", function()
        assert.truthy(graph["tollgate.handler"])
        assert.truthy(graph["tollgate.config.watch"])
    end)

    it("require only modules that exist", function()
        for name, deps in pairs(graph) do
            for _, dep in ipairs(deps) do
                assert.truthy(graph[dep], name .. " requires " .. dep .. ", which does not exist")
            end
        end
    end)

    it("form no require cycle", function()
        local state = {}    -- nil: not seen, 1: on the path, 2: done
        local path = {}
        local function visit(n)
            state[n] = 1
            path[#path + 1] = n
            for _, d in ipairs(graph[n] or {}) do
                if state[d] == 1 then
                    local from = 1
                    for i, m in ipairs(path) do
                        if m == d then
                            from = i
                        end
                    end
                    error("require cycle: " .. table.concat(path, " -> ", from) .. " -> " .. d)
                elseif state[d] == nil then
                    visit(d)
                end
            end
            path[#path] = nil
            state[n] = 2
        end
        local names = {}
        for n in pairs(graph) do
            names[#names + 1] = n
        end
        table.sort(names)
        for _, n in ipairs(names) do
            if not state[n] then
                visit(n)
            end
        end
    end)
end)
