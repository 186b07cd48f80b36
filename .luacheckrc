std = "ngx_lua"
max_line_length = 100
files["t/lua"] = { std = "+busted" }
files["redis-scripts"] = {
    std = "lua51",
    globals = { "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct" },
    -- the prelude's helpers are used by the scripts it is prepended to
    ignore = { "211/tg_.*", "113/tg_.*" },
}
