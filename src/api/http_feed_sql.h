/* http_feed_sql.h — the statements that read a person's feed, in one place:
 * the JSON of one item, shared by the feed's endpoints
 * (http_handlers_feed.c) and the live feeds (http_stream.c), and the
 * statements of the feed's endpoints, which crier bench feed's baseline runs
 * as they are (src/bench/bench_feed.c).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: nothing (SQL text only).
 */
#ifndef CRIER_HTTP_FEED_SQL_H
#define CRIER_HTTP_FEED_SQL_H

/* One feed item as JSON, from the columns of crier.feed aliased f. */
#define CRIER_HTTP_FEED_ITEM_JSON                                                                  \
    "json_build_object('id', f.id, 'kind', f.kind, 'type', f.event_type, 'content', f.content,"    \
    " 'created_at', f.created_at, 'read', f.read, 'seen', f.seen, 'archived', f.archived)"

/* The feed's statements (crier bench feed's baseline runs the same texts):
 * a page ($1 tenant, $2 user, $3 before, $4 limit, $5 archived), the first
 * page (no cursor: $3 limit, $4 archived; prepared per connection), the
 * counts ($1, $2) and mark-all ($1, $2, $3 what, $4 upto, $5 snapshot, $6
 * since: crier.feed_mark_all). The first page's rows also carry the
 * snapshot it was read at (the live feed's id to follow from, and its head
 * cursor's bound): one row with no item when the feed is empty. */
#define CRIER_HTTP_SQL_FEED_PAGE                                                                   \
    "SELECT " CRIER_HTTP_FEED_ITEM_JSON                                                            \
    ", f.id FROM crier.feed($1, $2, $3::bigint, $4::int, $5::bool) f ORDER BY f.id DESC"
#define CRIER_HTTP_SQL_FEED_FIRST_PAGE                                                             \
    "SELECT x.j, x.id, s.snapshot FROM (SELECT pg_current_snapshot()::text AS snapshot) s"         \
    " LEFT JOIN LATERAL (SELECT " CRIER_HTTP_FEED_ITEM_JSON " AS j, f.id"                          \
    " FROM crier.feed($1, $2, NULL, $3::int, $4::bool) f) x ON true ORDER BY x.id DESC NULLS LAST"
#define CRIER_HTTP_SQL_FEED_COUNTS                                                                 \
    "SELECT json_build_object('unread', c.unread, 'unseen', c.unseen)"                             \
    " FROM crier.feed_counts($1, $2) c"
#define CRIER_HTTP_SQL_FEED_MARK_ALL                                                               \
    "SELECT crier.feed_mark_all($1, $2, $3, $4::bigint, $5::pg_snapshot, $6::pg_snapshot)"

#endif
