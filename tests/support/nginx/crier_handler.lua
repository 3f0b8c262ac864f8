-- crier_handler: the nginx side of tests/integration/nginx_lua.sh. Loads the
-- example rules with crier's Lua library in init_by_lua (the master) and
-- serves, from the workers:
--   GET  /rules   {"event_types": [...], "files": [...], "lua": "...", "version": "<sha256>"}
--   GET  /rules?fresh=1   the same from a generation loaded inside the request
--   GET  /plan?tenant=&entity=&amount=[&currency=][&memo=][&type=][&id=]
--        {"deliveries": [{"body": {...}, "channel", "recipient", "url"}],
--         "recipients": [...], "version": "<sha256>"}
--   GET  /render?name=[&plan=]   a fixed HTML template, values escaped
--   POST /render?html=1&k=v...   the request body is the template, the query
--                                arguments its context (ctx.args)
-- Refusals by the library (unknown event type, invalid payload, template
-- errors) are 400 {"error": {"code", "message"}}, a rule error 500; any Lua
-- error raised while handling is a 500 whose body is the message.
local ngx = ngx -- luacheck: ignore 113

local crier = require "crier"
local json = require "crier.json"
local template = require "crier.template"
local adapter = require "crier.nginx"

local M = {}

local options -- what init() was given, for /rules?fresh=1
local loaded -- { generation =, version =, files = }

local greeting = assert(template.compile(
    "<p>Hello {{ user.name }}, your plan is {{ user.plan | default('free') }}.</p>",
    { html = true, name = "greeting" }))

-- init(opts): in init_by_lua. opts = { rules_dir =, settings = { name =
-- value } } (the directory's rule files are listed). Raises (nginx does not start) when the
-- rules do not load.
function M.init(opts)
    options = opts
    local err
    loaded, err = adapter.load_rules(opts.rules_dir, nil, opts.settings)
    if not loaded then
        error("crier rules did not load from " .. opts.rules_dir .. ":\n" .. err, 0)
    end
end

local function send(status, body, content_type)
    ngx.status = status
    ngx.header["Content-Type"] = content_type or "application/json"
    ngx.say(body)
end

local function refuse(status, code, message)
    send(status, assert(json.encode({ error = { code = code, message = message } })))
end

-- Runs fn; a raised error becomes a 500 whose body is the message.
local function guarded(fn)
    return function()
        local ok, err = xpcall(fn, debug.traceback)
        if not ok then
            send(500, tostring(err), "text/plain")
        end
    end
end

local function arg_string(args, name)
    local v = args[name]
    if type(v) == "table" then
        v = v[#v]
    end
    if v == true then
        v = ""
    end
    return v
end

M.rules = guarded(function()
    local args = ngx.req.get_uri_args()
    local current = loaded
    if arg_string(args, "fresh") == "1" then
        local err
        current, err = adapter.load_rules(options.rules_dir, nil, options.settings)
        if not current then
            return refuse(500, "load_error", err)
        end
    end
    send(200, assert(json.encode({
        event_types = json.array(current.generation:event_types()),
        files = json.array(current.files),
        lua = jit and jit.version or _VERSION,
        crier = crier._VERSION,
        version = current.version,
    })))
end)

M.plan = guarded(function()
    local args = ngx.req.get_uri_args()
    local entity = arg_string(args, "entity")
    local payload = {
        invoice_id = entity,
        amount_cents = tonumber(arg_string(args, "amount")),
        currency = arg_string(args, "currency") or "EUR",
        memo = arg_string(args, "memo"),
    }
    local event = {
        id = tonumber(arg_string(args, "id")) or 1,
        tenant = arg_string(args, "tenant"),
        type = arg_string(args, "type") or "invoice.created",
        entity_id = entity,
        payload_json = assert(json.encode(payload)),
    }
    if type(event.tenant) ~= "string" or type(event.entity_id) ~= "string" then
        return refuse(400, "bad_request", "tenant and entity are required")
    end
    local plan, err, code = loaded.generation:plan(event)
    if not plan then
        return refuse(code == "rule_error" and 500 or 400, code, err)
    end
    local recipients, deliveries = json.array(), json.array()
    for _, entry in ipairs(plan) do
        recipients[#recipients + 1] = entry.recipient
        for _, d in ipairs(entry.deliveries) do
            deliveries[#deliveries + 1] = {
                recipient = entry.recipient,
                channel = d.channel,
                url = d.url,
                body = assert(json.decode(d.body)),
            }
        end
    end
    send(200, assert(json.encode({ version = loaded.version, recipients = recipients, deliveries = deliveries })))
end)

M.render = guarded(function()
    local args = ngx.req.get_uri_args()
    local text, err
    if ngx.req.get_method() == "POST" then
        ngx.req.read_body()
        local source = ngx.req.get_body_data() -- nil for an empty body: compile raises, a 500
        local ctx = { args = {} }
        for k, _ in pairs(args) do
            ctx.args[k] = arg_string(args, k)
        end
        local fn
        fn, err = template.compile(source, { html = arg_string(args, "html") == "1", name = "posted" })
        if fn then
            text, err = fn(ctx)
        end
    else
        text, err = greeting({ user = { name = arg_string(args, "name"), plan = arg_string(args, "plan") } })
    end
    if not text then
        return refuse(400, "template_error", err)
    end
    send(200, text, "text/html; charset=utf-8")
end)

return M
