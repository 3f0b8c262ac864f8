-- Planning speed of the rules alone (no database): N gen:plan calls of the
-- billing example's invoice.created event (3 recipients, JSON bodies).
-- usage: luajit scripts/bench-plan.lua [N] [SOURCE_DIR]   (SOURCE_DIR: the crier checkout, default .)
local n = tonumber(arg[1]) or 20000
local src = arg[2] or "."
package.path = src .. "/lua/?.lua;" .. src .. "/lua/?/init.lua;" .. package.path
local runtime = require "crier.runtime"
local f = assert(io.open(src .. "/examples/rules/billing.lua"))
local gen = assert(runtime.new_generation({ { path = "billing.lua", source = f:read("*a") } }, {}))
f:close()
local ev = { id = 1, tenant = "acme", type = "invoice.created", entity_id = "inv_1",
    payload_json = '{"invoice_id":"inv_1","amount_cents":1250,"currency":"EUR"}' }
local t = os.clock()
for _ = 1, n do
    assert(gen:plan(ev))
end
local dt = os.clock() - t
print(string.format("%d plans in %.2fs: %.0f plans/s (%.0f recipients/s)", n, dt, n / dt, 3 * n / dt))
