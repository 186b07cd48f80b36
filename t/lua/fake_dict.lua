-- An in-memory stand-in for ngx.shared.DICT in the busted specs: get / set / safe_set /
-- safe_add / incr with the dict's results (incr of a missing key without init is "not found",
-- safe_add of a present key "exists"). Values live in d.v; `room` limits how many keys
-- safe_add still takes (then "no memory").
return function()
    local d = { v = {}, room = math.huge }
    function d:get(k) return self.v[k] end
    function d:set(k, v) self.v[k] = v; return true end
    function d:safe_set(k, v) self.v[k] = v; return true end
    function d:safe_add(k, v)
        if self.v[k] ~= nil then
            return false, "exists"
        end
        if self.room <= 0 then
            return false, "no memory"
        end
        self.room = self.room - 1
        self.v[k] = v
        return true
    end
    function d:incr(k, by, init)
        local v = self.v[k]
        if v == nil then
            if init == nil then
                return nil, "not found"
            end
            v = init
        end
        self.v[k] = v + by
        return self.v[k]
    end
    return d
end
