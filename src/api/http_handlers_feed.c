/* http_handlers_feed.c — a person's feed over HTTP: the page of items (keyset
 * pagination with signed cursors), unread/unseen counts, mark all read or
 * seen (exact: crier.feed_mark_all stores the request's snapshot), and
 * marking one item. A user token reaches only its own person's feed; an API
 * key names the person with ?user=.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_handlers.h"
#include "alloc.h"

#include "http_auth.h"
#include "http_feed_sql.h"
#include "http_head.h"
#include "http_page.h"
#include "http_query.h"
#include "http_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEED_DEFAULT_LIMIT 20
/* the longest cursor read-all takes: a head cursor with two snapshots */
#define FEED_CURSOR_MAX (CRIER_BASE64URL_LEN(1 + 8 + 2 * CRIER_HTTP_SNAPSHOT_MAX + 1 + 16) + 4)


/* The person whose feed the request reads: the token's user, or ?user= with
 * an API key. */
static int feed_user(crier_http_request *r, const char **user)
{
    return crier_http_person(r, "read its own user's feed", user);
}

/* Appends the first page's head_cursor (its newest item, bounded by the
 * snapshot the page was read at: POST /v1/feed/read-all {"cursor": head}
 * marks read what the page showed, not what arrived or committed since) and
 * last_event_id (that snapshot: the live feed opened from it sends what
 * committed after the page was read, so nothing falls between the two). */
static void feed_page_head(crier_http_request *r, crier_json_buf *out, const char *user,
                           const PGresult *res, int n)
{
    const char *snapshot = PQgetvalue(res, 0, 2);
    char *head =
        n > 0 ? crier_http_head_sign(r->secret, r->secret_len, user,
                                     strtoll(PQgetvalue(res, 0, 1), NULL, 10), snapshot, NULL)
              : NULL;
    crier_json_buf_puts(out, ",\"head_cursor\":");
    if (head)
        crier_json_buf_string(out, head);
    else
        crier_json_buf_puts(out, "null");
    crier_json_buf_puts(out, ",\"last_event_id\":");
    crier_json_buf_string(out, snapshot);
    free(head);
}

int crier_http_feed_list(crier_http_request *r)
{
    const char *user, *cursor;
    long long limit;
    bool archived;
    int64_t before = 0;
    char before_text[24], limit_text[24];
    const char *values[4];
    PGresult *res;
    crier_json_buf out = {0};
    int n;

    if (feed_user(r, &user) < 0 ||
        crier_http_arg_int(r, "limit", 1, CRIER_HTTP_PAGE_MAX, FEED_DEFAULT_LIMIT, &limit) < 0 ||
        crier_http_arg_bool(r, "archived", false, &archived) < 0 ||
        crier_http_arg(r, "cursor", &cursor) < 0)
        return -1;
    const char *scope[] = {"feed", user, archived ? "archived" : "live"};
    if (cursor && crier_http_cursor_decode(r, cursor, scope, 3, &before, 1) < 0)
        return -1;
    snprintf(before_text, sizeof before_text, "%lld", (long long)before);
    snprintf(limit_text, sizeof limit_text, "%lld", limit + 1);
    values[0] = user; /* $2, after the tenant */
    values[1] = cursor ? before_text : NULL;
    values[2] = limit_text;
    values[3] = archived ? "true" : "false";
    /* one row more than the page tells whether another page follows. The
     * first page (the hot one: every inbox opening) is a statement prepared
     * per connection, with no cursor in its text; a later page is planned
     * for its cursor (a generic plan shared by both made deep pages slower:
     * docs/BENCHMARKS.md) */
    if (cursor)
        res = crier_http_query_tenant(r, CRIER_HTTP_SQL_FEED_PAGE, 4, values);
    else
        res = crier_http_query_tenant_prepared(
            r, CRIER_HTTP_STMT_FEED_FIRST_PAGE, CRIER_HTTP_SQL_FEED_FIRST_PAGE, 3,
            (const char *const[]){values[0], values[2], values[3]});
    if (!res)
        return -1;
    n = PQntuples(res);
    if (!cursor && n == 1 && PQgetisnull(res, 0, 1))
        n = 0; /* the first page of an empty feed: its one row is the snapshot */
    crier_http_page_items(&out, res, n < limit ? n : (int)limit);
    crier_http_page_cursor(r, &out, "next_cursor", res, n > limit ? (int)limit - 1 : -1, 1, 1,
                           scope, 3);
    if (!cursor)
        feed_page_head(r, &out, user, res, n);
    else
        crier_json_buf_puts(&out, ",\"head_cursor\":null,\"last_event_id\":null");
    crier_json_buf_puts(&out, "}");
    PQclear(res);
    crier_http_reply(r, 200, out.data, out.len);
    crier_json_buf_free(&out);
    return 0;
}

/* Answers with the person's counts (after a change, in its transaction). */
static int feed_reply_counts(crier_http_request *r, const char *user, unsigned status)
{
    const char *values[1] = {user};
    PGresult *res = crier_http_query_tenant(r, CRIER_HTTP_SQL_FEED_COUNTS, 1, values);
    if (!res)
        return -1;
    crier_http_reply(r, status, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    return 0;
}

int crier_http_feed_counts(crier_http_request *r)
{
    const char *user;
    if (feed_user(r, &user) < 0)
        return -1;
    return feed_reply_counts(r, user, 200);
}

int crier_http_feed_mark_all(crier_http_request *r)
{
    static const char *const names[] = {"cursor"};
    crier_http_field f[1];
    const char *user, *cursor;
    const char *what = !strcmp(r->segments[2], "seen-all") ? "seen" : "read";
    crier_http_head *head = NULL;
    char upto_text[24];
    const char *values[5];
    PGresult *res;
    int rc = -1;

    if (feed_user(r, &user) < 0 || crier_http_body_fields(r, names, 1, f, true) < 0 ||
        crier_http_field_string(r, &f[0], false, FEED_CURSOR_MAX, true, &cursor) < 0)
        goto out;
    values[0] = user;
    values[1] = what;
    values[2] = values[3] = values[4] = NULL;
    if (cursor) {
        head = crier_xmalloc(sizeof *head);
        if (crier_http_head_decode(r, cursor, user, head) < 0)
            goto out;
        snprintf(upto_text, sizeof upto_text, "%lld", (long long)head->upto);
        values[2] = upto_text;
        values[3] = head->snapshot;
        values[4] = head->since;
    }
    res = crier_http_query_tenant(r, CRIER_HTTP_SQL_FEED_MARK_ALL, 5, values);
    if (!res)
        goto out;
    bool usable = !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (!usable) {
        crier_http_error(r, 400, "invalid_cursor",
                         "the cursor's snapshot is not one this database has passed (restored "
                         "from a backup since?): reload the feed and use its head_cursor");
        goto out;
    }
    rc = feed_reply_counts(r, user, 200);
out:
    free(head);
    return rc;
}

int crier_http_feed_item(crier_http_request *r)
{
    static const struct {
        const char *action, *what, *value;
    } actions[] = {
        {"read", "read", "true"},        {"unread", "read", "false"},
        {"seen", "seen", "true"},        {"unseen", "seen", "false"},
        {"archive", "archived", "true"}, {"unarchive", "archived", "false"},
    };
    const char *user;
    long long item;
    char item_text[24];
    const char *values[4];
    PGresult *res;
    size_t a;

    for (a = 0; a < sizeof actions / sizeof actions[0]; a++)
        if (!strcmp(r->segments[4], actions[a].action))
            break;
    if (a == sizeof actions / sizeof actions[0])
        return crier_http_error(
            r, 404, "not_found",
            "no such action: use read, unread, seen, unseen, archive or unarchive");
    if (crier_http_path_id(r, r->segments[3], "the item id", &item) < 0 || feed_user(r, &user) < 0)
        return -1;
    snprintf(item_text, sizeof item_text, "%lld", item);
    values[0] = user;
    values[1] = item_text;
    values[2] = actions[a].what;
    values[3] = actions[a].value;
    res = crier_http_query_tenant(r, "SELECT crier.feed_mark($1, $2, $3::bigint, $4, $5::bool)", 4,
                                  values);
    if (!res)
        return -1;
    bool found = !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (!found)
        return crier_http_error(r, 404, "not_found", "no item %lld in this feed", item);
    res = crier_http_query_tenant(r,
                                  "SELECT " CRIER_HTTP_FEED_ITEM_JSON
                                  " FROM crier.feed($1, $2, $3::bigint + 1, 1, true) f"
                                  " WHERE f.id = $3::bigint",
                                  2, values);
    if (!res)
        return -1;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return crier_http_error(r, 404, "not_found", "no item %lld in this feed", item);
    }
    crier_http_reply(r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    return 0;
}

/* A live feed: Server-Sent Events from the request's snapshot, or from the
 * snapshot the client last got (Last-Event-ID, or ?last_event_id=). The
 * request's transaction only authenticates and takes the snapshot; the
 * stream itself is played by the live feeds hub (http_stream.c). */
int crier_http_feed_stream(crier_http_request *r)
{
    const char *user, *last = crier_http_header(r, "Last-Event-ID"), *q;
    PGresult *res;

    if (feed_user(r, &user) < 0 || crier_http_arg(r, "last_event_id", &q) < 0)
        return -1;
    if (!last || !last[0])
        last = q && q[0] ? q : NULL;
    if (last && !crier_http_snapshot_valid(last))
        return crier_http_error(r, 400, "invalid_cursor",
                                "Last-Event-ID is not an id this stream sent (expected the id of "
                                "its last event, as xmin:xmax:xip-list); reconnect without it");
    const char *values[1] = {last};
    /* not tenant-scoped: the snapshot the stream starts from (the hub scopes
     * what it reads to the stream's tenant and person) */
    res = crier_http_query(r, "SELECT coalesce($1::text, pg_current_snapshot()::text)", 1, values);
    if (!res)
        return -1;
    r->stream =
        crier_http_streams_open(r->ctx->streams, r, user, PQgetvalue(res, 0, 0), last != NULL);
    PQclear(res);
    if (!r->stream)
        return crier_http_error(r, 503, "busy", "the server is shutting down; reconnect shortly");
    r->status = 200;
    r->content_type = "text/event-stream";
    return 0;
}
