-- An example configuration file for crier: `crier serve --config examples/crier.conf.lua`,
-- or CRIER_CONFIG=examples/crier.conf.lua for every command. Keys are long options
-- (underscores for dashes: batch_size is --batch-size); flags on the command line win.
-- The top level holds what every command takes; a command's own options go in a
-- table named after it (serve, dead, feed, bench_feed, ...). It is Lua without io or
-- os.execute: secrets come from the environment.
return {
    -- database = "host=/run/postgresql dbname=crier",  -- default: CRIER_DATABASE_URL, else embedded
    rules = "examples/rules",
    set = {
        billing_webhook_url = os.getenv("BILLING_WEBHOOK_URL") or "http://127.0.0.1:9000/hooks",
    },
    serve = {
        batch_size = 200,
        poll = 1,
        -- http = "127.0.0.1:8080",
        -- cors_origin = "https://app.example.com",
        -- smtp_url = "smtp://127.0.0.1:25",
        -- email_from = "billing@example.com",
        -- kafka_brokers = "127.0.0.1:9092",
    },
    dead = { limit = 50 },
}
