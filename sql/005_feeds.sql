-- 005_feeds.sql — in-app feeds. A person's feed merges their own items
-- (fan-out on write: a rule's "feed" channel, one row per recipient) with the
-- items of the audiences they belong to (fan-out on read: a rule in mode
-- "read" stores the event once for an audience). Read, seen and archived are
-- per person and item; "mark all read" stores the reader's snapshot, so it is
-- exact: an item whose transaction had not committed when the person clicked
-- stays unread, whatever its timestamps say. The feed's functions (crier.feed,
-- feed_counts, feed_mark, feed_mark_all, join_audience, …) are in sql/functions/.

-- Positions in feeds: one sequence for both kinds of items, so a merged feed
-- pages by one key.
CREATE SEQUENCE crier.feed_position;

CREATE TABLE crier.feed_items (
    id              bigint      PRIMARY KEY DEFAULT nextval('crier.feed_position'),
    tenant          text        NOT NULL,
    recipient_id    text        NOT NULL,
    notification_id bigint      NOT NULL UNIQUE REFERENCES crier.notifications (id),
    event_type      text        NOT NULL,
    content         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- the inserting transaction: compared with stored snapshots by mark-all-read
    txid            xid8        NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX feed_items_person ON crier.feed_items (tenant, recipient_id, id);
CREATE INDEX feed_items_person_txid ON crier.feed_items (tenant, recipient_id, txid);

CREATE TABLE crier.audience_items (
    id         bigint      PRIMARY KEY DEFAULT nextval('crier.feed_position'),
    tenant     text        NOT NULL,
    audience   text        NOT NULL,
    event_id   bigint      NOT NULL REFERENCES crier.events (id),
    event_type text        NOT NULL,
    content    jsonb       NOT NULL,
    backfill   boolean     NOT NULL DEFAULT false, -- visible to members who join later
    created_at timestamptz NOT NULL DEFAULT now(),
    txid       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (event_id, audience)
);
CREATE INDEX audience_items_audience ON crier.audience_items (tenant, audience, id);
CREATE INDEX audience_items_audience_txid ON crier.audience_items (tenant, audience, txid);

-- Who belongs to an audience, from when. Leaving sets left_at; joining again
-- starts a new row.
CREATE TABLE crier.memberships (
    tenant       text        NOT NULL,
    audience     text        NOT NULL,
    recipient_id text        NOT NULL,
    joined_at    timestamptz NOT NULL DEFAULT now(),
    left_at      timestamptz,
    -- the position of the feed when the person joined: later audience items
    -- only (unless an item backfills)
    joined_position bigint   NOT NULL,
    left_position   bigint,
    PRIMARY KEY (tenant, audience, recipient_id, joined_at)
);
CREATE INDEX memberships_person ON crier.memberships (tenant, recipient_id) WHERE left_at IS NULL;

-- Per person and item: explicit states (an item marked one by one). NULL:
-- not set, the watermarks decide; true/false override them (so an item can
-- be marked unread below the mark-all-read watermark).
CREATE TABLE crier.feed_states (
    tenant       text        NOT NULL,
    recipient_id text        NOT NULL,
    item_id      bigint      NOT NULL,
    read         boolean,
    seen         boolean,
    archived     boolean,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, recipient_id, item_id)
);

-- Per person: the snapshots of the last "mark all read" / "mark all seen".
-- An item is read by the watermark when its transaction is visible in the
-- snapshot and its position is at most read_upto (NULL: any position).
CREATE TABLE crier.feed_watermarks (
    tenant        text        NOT NULL,
    recipient_id  text        NOT NULL,
    read_snapshot pg_snapshot,
    read_upto     bigint,
    read_at       timestamptz,
    seen_snapshot pg_snapshot,
    seen_upto     bigint,
    seen_at       timestamptz,
    PRIMARY KEY (tenant, recipient_id)
);
