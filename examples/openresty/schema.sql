-- The example application's own table: orders, written by the nginx handler
-- in the same transaction as the order.created event.
CREATE SCHEMA IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.orders (
    id          text PRIMARY KEY,
    customer    text NOT NULL,
    total_cents bigint NOT NULL CHECK (total_cents >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
