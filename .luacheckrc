-- luacheck configuration for the crier Lua library, example rules and specs.
std = "luajit"
max_line_length = 120
exclude_files = { "build*/**", ".crier/**" }

-- busted specs (tests/lua and the example rules' specs) use busted's globals.
files["**/*_spec.lua"] = { std = "+busted" }
