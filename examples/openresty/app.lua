-- app: the example's handlers. POST /orders writes an order row and emits
-- order.created in ONE transaction (both or neither); GET /rules says which
-- rules version each worker runs. Feeds are crier.nginx_feed's.
local ngx = ngx -- luacheck: ignore 113

local json = require "crier.json"
local crier_nginx = require "crier.nginx"

local M = {}

local function send(status, value)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.say(assert(json.encode(value)))
end

-- POST /orders {"id": "...", "customer": "...", "total_cents": n}
function M.create_order()
    ngx.req.read_body()
    local order = json.decode(ngx.req.get_body_data() or "")
    if type(order) ~= "table" or type(order.id) ~= "string" or type(order.customer) ~= "string"
        or type(order.total_cents) ~= "number" then
        return send(400, { error = { code = "invalid_body", message = "send {id, customer, total_cents}" } })
    end
    local event_id, err, sqlstate = crier_nginx.transaction(function(tx)
        local rows, qerr, qstate = tx:query(
            "INSERT INTO shop.orders (id, customer, total_cents) VALUES ($1, $2, $3) RETURNING id",
            { order.id, order.customer, order.total_cents })
        if not rows then
            return nil, qerr, qstate
        end
        -- the dedupe key makes a retried request the same event
        return tx:emit(ngx.var.tenant, "order.created", order.id,
            { order_id = order.id, customer = order.customer, total_cents = order.total_cents }, "order:" .. order.id)
    end)
    if not event_id then
        if sqlstate == "23505" then
            return send(409, { error = { code = "duplicate_order", message = "order " .. order.id .. " exists" } })
        elseif sqlstate and sqlstate:match("^2[23]") then
            return send(400, { error = { code = "invalid_order", message = err } })
        end
        ngx.log(ngx.ERR, "orders: ", err)
        return send(503, { error = { code = "database_unavailable", message = "try again shortly" } })
    end
    send(201, { order_id = order.id, event_id = event_id })
end

function M.rules()
    send(200, crier_nginx.rules_status())
end

return M
