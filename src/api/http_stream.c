/* http_stream.c — live feeds by Server-Sent Events (see http_stream.h): the
 * hub thread (LISTEN crier_feed, what changed since each stream's snapshot),
 * the streams' buffers, and the content reader that plays them to
 * libmicrohttpd, parking the connection while there is nothing to send.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_stream.h"
#include "alloc.h"

#include "clock.h"
#include "http_feed_sql.h"
#include "http_head.h"
#include "http_pool.h"
#include "log.h"
#include "pg_array.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STREAM_RETRY_MS 3000      /* the client's reconnect delay (the SSE retry field) */
#define STREAM_RECONNECT_MAX 5.0  /* seconds between attempts to reach the database, at most */
#define STREAM_MAX_AUDIENCES 256  /* audience announcements resolved per wake-up */

struct crier_http_stream {
    crier_http_streams *hub;
    struct MHD_Connection *conn;
    char *tenant, *user;
    long long expires;     /* unix seconds; 0: never (API keys) */
    long long key_id;      /* the API key that opened it; 0: a user token */
    char secret_hex[2 * CRIER_HTTP_SECRET_MAX + 1]; /* the tenant's secret then */
    unsigned char secret[CRIER_HTTP_SECRET_MAX];    /* the same bytes: signs head cursors */
    size_t secret_len;
    atomic_int refs;       /* the hub's list and the response each hold one */
    atomic_bool closed;    /* the response is gone (client left or stream ended) */
    /* under hub->lock */
    char *since;           /* the snapshot the stream last read at */
    char *last_counts;     /* the counts last sent */
    bool dirty, resync;    /* needs an update; must tell the client to reload */
    bool suspended, ending;
    crier_json_buf out;    /* bytes not yet handed to libmicrohttpd */
    size_t out_pos;
    crier_http_stream *next;
};

struct crier_http_streams {
    pthread_t thread;
    bool started;
    int wake[2]; /* a pipe: open/close/stop wake the hub */
    char *conninfo;
    double keepalive;

    pthread_mutex_t lock;
    crier_http_stream *streams; /* every stream not yet released by the hub */
    bool stopping, closing;
    long open;                  /* gauge: streams in the list */
    unsigned long long opened, items_sent, resyncs, updates, notifies, db_errors;
    bool listening;

    /* hub thread only */
    PGconn *listen, *query;
    double reconnect_at, reconnect_delay;
    double retry_at; /* after an update failed with the connection fine: not before */
    crier_pg_array users; /* the audience lookup's parameter */
    crier_pg_array cred[3]; /* the credentials check's parameters */
    crier_pg_array batch[3]; /* the updates' parameters */
    double next_cred_check;
};

static void stream_wake(crier_http_streams *hub)
{
    char c = 1;
    ssize_t n = write(hub->wake[1], &c, 1);
    (void)n; /* a full pipe already wakes the hub */
}

static void stream_unref(crier_http_stream *st)
{
    if (atomic_fetch_sub(&st->refs, 1) != 1)
        return;
    free(st->tenant);
    free(st->user);
    free(st->since);
    free(st->last_counts);
    crier_json_buf_free(&st->out);
    free(st);
}

/* ------------------------------------------------------------------------
 * Writing to a stream (under hub->lock)
 */

/* Appends bytes; a client that lets more than CRIER_STREAM_MAX_BUFFER pile up
 * is cut off (it reconnects with its Last-Event-ID and misses nothing).
 * Returns true when the caller must resume the connection (after unlocking). */
static bool stream_put(crier_http_stream *st, const char *s, size_t n)
{
    if (st->ending || atomic_load(&st->closed))
        return false;
    if (st->out.len - st->out_pos + n > CRIER_STREAM_MAX_BUFFER) {
        crier_warn("http", "live feed of %s/%s: the client reads too slowly; closing its stream",
                   st->tenant, st->user);
        st->ending = true;
    } else {
        crier_json_buf_add(&st->out, s, n);
    }
    if (!st->suspended)
        return false;
    st->suspended = false;
    return true;
}

/* One event: "event: NAME" (and "id: ID") and the data line (JSON has no
 * newlines: PostgreSQL's json text escapes them). */
static void stream_event(crier_json_buf *b, const char *name, const char *id, const char *data,
                         size_t len)
{
    if (id)
        crier_json_buf_printf(b, "id: %s\n", id);
    crier_json_buf_printf(b, "event: %s\ndata: ", name);
    crier_json_buf_add(b, data, len);
    crier_json_buf_puts(b, "\n\n");
}

/* ------------------------------------------------------------------------
 * libmicrohttpd's side: the content reader and the response's end
 */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    crier_http_stream *st = cls;
    crier_http_streams *hub = st->hub;
    ssize_t n;
    (void)pos;

    pthread_mutex_lock(&hub->lock);
    size_t avail = st->out.len - st->out_pos;
    if (avail > 0) {
        n = (ssize_t)(avail < max ? avail : max);
        memcpy(buf, st->out.data + st->out_pos, (size_t)n);
        st->out_pos += (size_t)n;
        if (st->out_pos == st->out.len)
            st->out.len = st->out_pos = 0;
    } else if (st->ending) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* nothing to send: park the connection until the hub has more (the
         * pattern libmicrohttpd prescribes; returning 0 alone would spin) */
        st->suspended = true;
        MHD_suspend_connection(st->conn);
        n = 0;
    }
    pthread_mutex_unlock(&hub->lock);
    return n;
}

static void stream_response_done(void *cls)
{
    crier_http_stream *st = cls;
    crier_http_streams *hub = st->hub;
    atomic_store(&st->closed, true);
    stream_wake(hub);
    stream_unref(st);
}

struct MHD_Response *crier_http_stream_response(crier_http_stream *st, struct MHD_Connection *conn)
{
    struct MHD_Response *resp;
    st->conn = conn;
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st,
                                             stream_response_done);
    if (!resp) {
        crier_http_stream_abandon(st);
        return NULL;
    }
    return resp;
}

void crier_http_stream_abandon(crier_http_stream *st)
{
    stream_response_done(st);
}

/* ------------------------------------------------------------------------
 * Opening and closing
 */

crier_http_stream *crier_http_streams_open(crier_http_streams *hub, const crier_http_request *r,
                                           const char *user, const char *since, bool resumed)
{
    const char *tenant = r->tenant;
    crier_http_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->hub = hub;
    st->expires = r->auth == CRIER_HTTP_AUTH_USER ? r->token_exp : 0;
    st->key_id = r->auth == CRIER_HTTP_AUTH_KEY ? r->key_id : 0;
    for (size_t i = 0; i < r->secret_len && i < CRIER_HTTP_SECRET_MAX; i++)
        snprintf(st->secret_hex + 2 * i, 3, "%02x", r->secret[i]);
    st->secret_len = r->secret_len < CRIER_HTTP_SECRET_MAX ? r->secret_len : CRIER_HTTP_SECRET_MAX;
    memcpy(st->secret, r->secret, st->secret_len);
    st->tenant = strdup(tenant);
    st->user = strdup(user);
    st->since = strdup(since);
    atomic_init(&st->refs, 2);
    atomic_init(&st->closed, false);
    if (!st->tenant || !st->user || !st->since) {
        atomic_store(&st->refs, 1);
        stream_unref(st);
        return NULL;
    }
    st->dirty = true; /* the first update: what committed since the snapshot, and the counts */
    crier_json_buf_printf(&st->out, "retry: %d\n: crier live feed%s\n\n", STREAM_RETRY_MS,
                          resumed ? " (resumed)" : "");
    pthread_mutex_lock(&hub->lock);
    if (hub->stopping || hub->closing) {
        pthread_mutex_unlock(&hub->lock);
        atomic_store(&st->refs, 1);
        stream_unref(st);
        return NULL;
    }
    st->next = hub->streams;
    hub->streams = st;
    hub->open++;
    hub->opened++;
    pthread_mutex_unlock(&hub->lock);
    stream_wake(hub);
    return st;
}

/* A list of streams, each holding a reference taken when it was added: the
 * streams to resume outside the lock, or to update. */
typedef struct {
    crier_http_stream **v;
    size_t n, cap;
} stream_list;

static void stream_list_add(stream_list *l, crier_http_stream *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        crier_http_stream **v = crier_xrealloc(l->v, cap * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    atomic_fetch_add(&st->refs, 1);
    l->v[l->n++] = st;
}

/* Resumes the connections of the streams in l (outside hub->lock) and drops
 * their references. */
static void stream_list_resume(stream_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        MHD_resume_connection(l->v[i]->conn);
        stream_unref(l->v[i]);
    }
    l->n = 0;
}

/* Under hub->lock: ends st; queues its resumption when it is parked. */
static void stream_end_locked(crier_http_stream *st, stream_list *resume)
{
    st->ending = true;
    if (st->suspended) {
        st->suspended = false;
        stream_list_add(resume, st);
    }
}

void crier_http_streams_close_all(crier_http_streams *hub)
{
    stream_list resume = {0};
    if (!hub)
        return;
    pthread_mutex_lock(&hub->lock);
    hub->closing = true;
    for (crier_http_stream *st = hub->streams; st; st = st->next)
        stream_end_locked(st, &resume);
    pthread_mutex_unlock(&hub->lock);
    stream_list_resume(&resume);
    free(resume.v);
}

/* ------------------------------------------------------------------------
 * The hub thread: database connections
 *
 * The hub's statements run on its own connections for many streams at once,
 * not on a request's, so they cannot go through crier_http_query_tenant:
 * each binds the tenant of every stream it reads for itself (the audience
 * lookup its one tenant, the updates and the credentials check one tenant
 * per stream, row by row).
 */

static void hub_disconnect(crier_http_streams *hub, const char *why)
{
    if (hub->listen || hub->query)
        crier_warn("http", "live feeds: lost the database (%s); reconnecting", why);
    if (hub->listen)
        PQfinish(hub->listen);
    if (hub->query)
        PQfinish(hub->query);
    hub->listen = hub->query = NULL;
    pthread_mutex_lock(&hub->lock);
    hub->listening = false;
    hub->db_errors++;
    pthread_mutex_unlock(&hub->lock);
    hub->reconnect_delay = hub->reconnect_delay > 0 ? hub->reconnect_delay * 2 : 0.25;
    if (hub->reconnect_delay > STREAM_RECONNECT_MAX)
        hub->reconnect_delay = STREAM_RECONNECT_MAX;
    hub->reconnect_at = crier_clock_s() + hub->reconnect_delay;
}

static bool hub_exec_ok(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    return ok;
}

/* Connects both connections and LISTENs. Every stream is updated afterwards:
 * announcements made while the hub was away are lost, snapshots are not. */
static bool hub_connect(crier_http_streams *hub)
{
    char err[512];
    if (crier_clock_s() < hub->reconnect_at)
        return false;
    hub->listen = crier_http_db_connect(hub->conninfo, "crier-api-live", err, sizeof err);
    hub->query = hub->listen ? crier_http_db_connect(hub->conninfo, "crier-api-live", err, sizeof err)
                             : NULL;
    if (!hub->query || !hub_exec_ok(hub->listen, "LISTEN crier_feed")) {
        if (hub->query)
            snprintf(err, sizeof err, "LISTEN failed: %s", PQerrorMessage(hub->listen));
        hub_disconnect(hub, err);
        return false;
    }
    hub->reconnect_delay = 0;
    pthread_mutex_lock(&hub->lock);
    hub->listening = true;
    for (crier_http_stream *st = hub->streams; st; st = st->next)
        st->dirty = true;
    pthread_mutex_unlock(&hub->lock);
    crier_debug("http", "live feeds: listening on crier_feed");
    return true;
}

/* ------------------------------------------------------------------------
 * The hub thread: announcements
 */

typedef struct {
    char kind;
    char *tenant, *who;
} hub_notice;

/* Parses "K<len>:<tenant><who>" (see sql/functions/feed_notify_payload.sql). */
static bool hub_parse(const char *payload, hub_notice *out)
{
    char *end;
    unsigned long len;
    if (!payload[0] || !strchr("pmaPM", payload[0]) || !isdigit((unsigned char)payload[1]))
        return false;
    len = strtoul(payload + 1, &end, 10);
    if (*end != ':' || strlen(end + 1) < len)
        return false;
    out->kind = payload[0];
    out->tenant = strndup(end + 1, len);
    out->who = strdup(end + 1 + len);
    if (!out->tenant || !out->who) {
        free(out->tenant);
        free(out->who);
        return false;
    }
    return true;
}

/* Marks the streams of an audience's members dirty: one query for the
 * members among the tenant's streaming people. */
static void hub_audience(crier_http_streams *hub, const char *tenant, const char *audience)
{
    PGresult *res;
    size_t n = 0;
    crier_pg_array_begin(&hub->users, CRIER_PG_TEXT);
    pthread_mutex_lock(&hub->lock);
    for (crier_http_stream *st = hub->streams; st; st = st->next)
        if (!strcmp(st->tenant, tenant)) {
            crier_pg_array_add_str(&hub->users, st->user);
            n++;
        }
    pthread_mutex_unlock(&hub->lock);
    if (!n)
        return;
    const char *array = crier_pg_array_end(&hub->users);
    const char *values[3] = {tenant, audience, array};
    int lengths[3] = {0, 0, (int)hub->users.len};
    int formats[3] = {0, 0, 1};
    res = PQexecParams(hub->query,
                       "SELECT DISTINCT recipient_id FROM crier.memberships"
                       " WHERE tenant = $1 AND audience = $2 AND recipient_id = ANY($3::text[])",
                       3, NULL, values, lengths, formats, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_warn("http", "live feeds: audience lookup failed: %s", PQresultErrorMessage(res));
        /* wake all of the tenant's streams rather than miss one */
        pthread_mutex_lock(&hub->lock);
        for (crier_http_stream *st = hub->streams; st; st = st->next)
            if (!strcmp(st->tenant, tenant))
                st->dirty = true;
        pthread_mutex_unlock(&hub->lock);
        PQclear(res);
        return;
    }
    pthread_mutex_lock(&hub->lock);
    for (int i = 0; i < PQntuples(res); i++)
        for (crier_http_stream *st = hub->streams; st; st = st->next)
            if (!strcmp(st->tenant, tenant) && !strcmp(st->user, PQgetvalue(res, i, 0)))
                st->dirty = true;
    pthread_mutex_unlock(&hub->lock);
    PQclear(res);
}

/* Reads the announcements that arrived: people's streams become dirty at
 * once, audiences are resolved to members afterwards. Returns false when the
 * listening connection broke. */
static bool hub_read_notices(crier_http_streams *hub)
{
    hub_notice audiences[STREAM_MAX_AUDIENCES];
    size_t n_aud = 0;
    bool overflow = false;
    PGnotify *nt;

    if (!PQconsumeInput(hub->listen))
        return false;
    while ((nt = PQnotifies(hub->listen))) {
        hub_notice n;
        if (hub_parse(nt->extra, &n)) {
            pthread_mutex_lock(&hub->lock);
            hub->notifies++;
            if (n.kind != 'a') {
                /* P, M: many people of the tenant at once (a bulk change) */
                bool everyone = n.kind == 'P' || n.kind == 'M';
                for (crier_http_stream *st = hub->streams; st; st = st->next)
                    if (!strcmp(st->tenant, n.tenant) && (everyone || !strcmp(st->user, n.who))) {
                        st->dirty = true;
                        /* a membership can reveal older (backfilled) items */
                        st->resync = st->resync || n.kind == 'm' || n.kind == 'M';
                    }
            }
            pthread_mutex_unlock(&hub->lock);
            bool kept = false;
            if (n.kind == 'a') {
                size_t i;
                for (i = 0; i < n_aud; i++)
                    if (!strcmp(audiences[i].tenant, n.tenant) && !strcmp(audiences[i].who, n.who))
                        break;
                if (i == n_aud && n_aud < STREAM_MAX_AUDIENCES) {
                    audiences[n_aud++] = n;
                    kept = true;
                } else if (i == n_aud) {
                    overflow = true;
                }
            }
            if (!kept) {
                free(n.tenant);
                free(n.who);
            }
        } else {
            crier_warn("http", "live feeds: ignored a malformed announcement on crier_feed");
        }
        PQfreemem(nt);
    }
    for (size_t i = 0; i < n_aud; i++) {
        hub_audience(hub, audiences[i].tenant, audiences[i].who);
        free(audiences[i].tenant);
        free(audiences[i].who);
    }
    if (overflow) { /* too many audiences at once: update everyone rather than miss one */
        pthread_mutex_lock(&hub->lock);
        for (crier_http_stream *st = hub->streams; st; st = st->next)
            st->dirty = true;
        pthread_mutex_unlock(&hub->lock);
    }
    return true;
}

/* ------------------------------------------------------------------------
 * The hub thread: updating a stream
 */

/* The updates of a batch of streams, in one statement (one snapshot, one
 * round trip): for each (tenant, user, since) of $1..$3, the counts, how many
 * items became visible since its snapshot (candidates, at most $4), and
 * those items (at most $6, oldest first, one JSON text per line: the JSON of
 * a row holds no raw newline) with their positions (in the same order,
 * space-separated) unless there are more than $5 candidates; and the
 * snapshot the statement read at. A NULL since (a resync) finds no
 * candidates. */
static const char SQL_UPDATE[] =
    "SELECT s.i, pg_current_snapshot()::text, cn.counts, ids.n, it.n_items, it.items, it.ids"
    " FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS s(tenant, usr, since, i)"
    " CROSS JOIN LATERAL (SELECT array_agg(c.id) AS ids, count(*) AS n"
    "   FROM crier.feed_change_ids(s.tenant, s.usr, s.since::pg_snapshot, $4::int) AS c(id)) ids"
    " CROSS JOIN LATERAL (SELECT count(*) AS n_items,"
    "     string_agg(x.j, E'\\n' ORDER BY x.id) AS items,"
    "     string_agg(x.id::text, ' ' ORDER BY x.id) AS ids"
    "   FROM (SELECT " CRIER_HTTP_FEED_ITEM_JSON "::text AS j, f.id"
    "         FROM unnest(ids.ids) AS c(id)"
    "         CROSS JOIN LATERAL crier.feed(s.tenant, s.usr, c.id + 1, 1) f"
    "         WHERE f.id = c.id AND ids.n <= $5::int ORDER BY f.id DESC LIMIT $6::int) x) it"
    " CROSS JOIN LATERAL (SELECT json_build_object('unread', c.unread, 'unseen', c.unseen)::text"
    "   AS counts FROM crier.feed_counts(s.tenant, s.usr) c) cn"
    " ORDER BY s.i";

#define STREAM_UPDATE_BATCH 100 /* streams per statement */

/* Appends one event whose data is the JSON object json[0..len) with one
 * more member, name: the cursor (a string), or null when there is none. */
static void stream_event_with(crier_json_buf *b, const char *event, const char *id,
                              const char *json, size_t len, const char *name, const char *cursor)
{
    crier_json_buf data = {0};
    while (len > 0 && json[len - 1] != '}')
        len--;
    if (len == 0) { /* not an object: PostgreSQL's json_build_object always is */
        stream_event(b, event, id, json, strlen(json));
        return;
    }
    crier_json_buf_add(&data, json, len - 1);
    crier_json_buf_printf(&data, ", \"%s\" : ", name);
    if (cursor)
        crier_json_buf_string(&data, cursor);
    else
        crier_json_buf_puts(&data, "null");
    crier_json_buf_puts(&data, "}");
    stream_event(b, event, id, data.data, data.len);
    crier_json_buf_free(&data);
}

/* Queues one stream's update from its row: the new items oldest first (or a
 * resync when there are too many), each with its head cursor, then the
 * counts with the update's head cursor and the new snapshot as the id.
 * Under hub->lock.
 *
 * What a client was sent is exact by snapshots: before this update,
 * everything visible in the stream's snapshot (since); with it, the items
 * visible in the new one. So an item's cursor covers everything visible in
 * since and the items of this update up to its position (sent before it:
 * oldest first), and the counts' cursor everything visible in the new
 * snapshot (http_head.h). After a resync nothing was sent: no cursor. */
static void hub_apply(crier_http_streams *hub, crier_http_stream *st, PGresult *res, int row,
                      bool resync, stream_list *resume)
{
    crier_json_buf ev = {0};
    long n_items = atol(PQgetvalue(res, row, 4));
    const char *new_since = PQgetvalue(res, row, 1), *counts = PQgetvalue(res, row, 2);
    char *head = NULL;
    if (atol(PQgetvalue(res, row, 3)) > CRIER_STREAM_MAX_ITEMS * 10 || n_items > CRIER_STREAM_MAX_ITEMS)
        resync = true;
    if (resync) {
        stream_event(&ev, "resync", NULL, "{\"reload\":true}", 15);
    } else if (n_items > 0) {
        const char *line = PQgetvalue(res, row, 5), *pos = PQgetvalue(res, row, 6);
        while (*line) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            char *next;
            int64_t id = strtoll(pos, &next, 10);
            char *cursor = NULL;
            if (next != pos) /* what it had sent before, and this update up to this item */
                cursor = crier_http_head_sign(st->secret, st->secret_len, st->user, id, new_since,
                                              st->since);
            pos = next;
            stream_event_with(&ev, "item", NULL, line, len, "cursor", cursor);
            free(cursor);
            line += len + (end ? 1 : 0);
        }
    }
    if (!resync)
        head = crier_http_head_sign(st->secret, st->secret_len, st->user, 0, new_since, new_since);
    if (ev.len > 0 || !st->last_counts || strcmp(st->last_counts, counts)) {
        /* the id rides on the update's last event: a client that reconnects
         * with it has everything up to this snapshot */
        stream_event_with(&ev, "counts", new_since, counts, strlen(counts), "head_cursor", head);
        if (stream_put(st, ev.data, ev.len))
            stream_list_add(resume, st);
        free(st->last_counts);
        st->last_counts = strdup(counts);
    }
    if (strlen(new_since) <= CRIER_HTTP_SNAPSHOT_MAX) {
        char *dup = strdup(new_since);
        if (dup) {
            free(st->since);
            st->since = dup;
        }
    }
    hub->updates++;
    hub->items_sent += resync ? 0 : (unsigned long long)n_items;
    hub->resyncs += resync;
    free(head);
    crier_json_buf_free(&ev);
}

/* Updates the streams v[0..n) (n <= STREAM_UPDATE_BATCH) in one statement.
 * Returns false on a database error (the streams stay dirty). */
static bool hub_update(crier_http_streams *hub, crier_http_stream **v, size_t n, stream_list *resume)
{
    bool resync[STREAM_UPDATE_BATCH];
    char cand[16], cap[16], max_items[16];
    const char *values[6];
    int lengths[6] = {0}, formats[6] = {1, 1, 1, 0, 0, 0};
    PGresult *res;

    crier_pg_array_begin(&hub->batch[0], CRIER_PG_TEXT);
    crier_pg_array_begin(&hub->batch[1], CRIER_PG_TEXT);
    crier_pg_array_begin(&hub->batch[2], CRIER_PG_TEXT);
    pthread_mutex_lock(&hub->lock);
    for (size_t i = 0; i < n; i++) {
        resync[i] = v[i]->resync;
        v[i]->dirty = v[i]->resync = false;
        crier_pg_array_add_str(&hub->batch[0], v[i]->tenant);
        crier_pg_array_add_str(&hub->batch[1], v[i]->user);
        crier_pg_array_add_str(&hub->batch[2], resync[i] ? NULL : v[i]->since);
    }
    pthread_mutex_unlock(&hub->lock);
    for (int i = 0; i < 3; i++) {
        values[i] = crier_pg_array_end(&hub->batch[i]);
        lengths[i] = (int)hub->batch[i].len;
    }
    /* candidates: one more than the cap tells that it was passed */
    snprintf(cand, sizeof cand, "%d", CRIER_STREAM_MAX_ITEMS * 10 + 1);
    snprintf(cap, sizeof cap, "%d", CRIER_STREAM_MAX_ITEMS * 10);
    snprintf(max_items, sizeof max_items, "%d", CRIER_STREAM_MAX_ITEMS + 1);
    values[3] = cand;
    values[4] = cap;
    values[5] = max_items;
    res = PQexecParams(hub->query, SQL_UPDATE, 6, NULL, values, lengths, formats, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != (int)n) {
        bool connected = PQstatus(hub->query) == CONNECTION_OK;
        crier_warn("http", "live feeds: an update failed: %s", PQresultErrorMessage(res));
        PQclear(res);
        pthread_mutex_lock(&hub->lock);
        for (size_t i = 0; i < n; i++) {
            v[i]->dirty = true;
            /* a query that failed on a good connection is retried a second
             * later without the streams' snapshots (a resync), so that no
             * bad value makes the hub fail in a loop */
            v[i]->resync = v[i]->resync || resync[i] || connected;
        }
        pthread_mutex_unlock(&hub->lock);
        if (connected)
            hub->retry_at = crier_clock_s() + 1.0;
        return false;
    }
    pthread_mutex_lock(&hub->lock);
    for (size_t i = 0; i < n; i++)
        hub_apply(hub, v[i], res, (int)i, resync[i], resume);
    pthread_mutex_unlock(&hub->lock);
    PQclear(res);
    return true;
}

/* ------------------------------------------------------------------------
 * The hub thread's loop
 */

/* Drops the streams whose response is gone. */
static void hub_reap(crier_http_streams *hub)
{
    pthread_mutex_lock(&hub->lock);
    crier_http_stream **p = &hub->streams;
    while (*p) {
        crier_http_stream *st = *p;
        if (atomic_load(&st->closed)) {
            *p = st->next;
            hub->open--;
            stream_unref(st);
        } else {
            p = &st->next;
        }
    }
    pthread_mutex_unlock(&hub->lock);
}

/* Under hub->lock: sends st the event that ends it (expired, revoked): the
 * error (code, message) and, as the event's id and as last_event_id, the
 * snapshot the stream has sent everything up to — where a new stream, with
 * a new credential, resumes without missing or repeating an item — then
 * ends it. */
static void stream_end_with(crier_http_stream *st, const char *event, const char *code,
                            const char *message, stream_list *resume)
{
    crier_json_buf ev = {0}, data = {0};
    crier_json_buf_puts(&data, "{\"error\":{\"code\":");
    crier_json_buf_string(&data, code);
    crier_json_buf_puts(&data, ",\"message\":");
    crier_json_buf_string(&data, message);
    crier_json_buf_puts(&data, "},\"last_event_id\":");
    crier_json_buf_string(&data, st->since);
    crier_json_buf_puts(&data, "}");
    stream_event(&ev, event, st->since, data.data, data.len);
    if (stream_put(st, ev.data, ev.len))
        stream_list_add(resume, st);
    stream_end_locked(st, resume);
    crier_json_buf_free(&data);
    crier_json_buf_free(&ev);
}

/* Ends the streams whose user token expired (the client reconnects with a
 * new one and the id the expired event carries); returns the next expiry
 * (unix seconds, 0: none). */
static long long hub_expire(crier_http_streams *hub, stream_list *resume)
{
    long long now = (long long)time(NULL), next = 0;
    pthread_mutex_lock(&hub->lock);
    for (crier_http_stream *st = hub->streams; st; st = st->next) {
        if (!st->expires || st->ending)
            continue;
        if (st->expires <= now) {
            stream_end_with(st, "expired", "token_expired",
                            "the user token that opened this stream has expired; open a new "
                            "stream with a fresh token and last_event_id (nothing is missed)",
                            resume);
        } else if (!next || st->expires < next) {
            next = st->expires;
        }
    }
    pthread_mutex_unlock(&hub->lock);
    return next;
}

/* Ends the streams whose credential no longer holds: the API key was
 * revoked, or the tenant's secret rotated (which voids every user token made
 * with it). One query for every open stream. */
static void hub_check_credentials(crier_http_streams *hub, stream_list *resume)
{
    int lengths[3], formats[3] = {1, 1, 1};
    const char *values[3];
    stream_list open = {0};
    PGresult *res;

    crier_pg_array_begin(&hub->cred[0], CRIER_PG_INT8);
    crier_pg_array_begin(&hub->cred[1], CRIER_PG_TEXT);
    crier_pg_array_begin(&hub->cred[2], CRIER_PG_TEXT);
    pthread_mutex_lock(&hub->lock);
    for (crier_http_stream *st = hub->streams; st; st = st->next) {
        crier_pg_array_add_int64(&hub->cred[0], st->key_id);
        crier_pg_array_add_str(&hub->cred[1], st->tenant);
        crier_pg_array_add_str(&hub->cred[2], st->secret_hex);
        stream_list_add(&open, st);
    }
    pthread_mutex_unlock(&hub->lock);
    if (open.n == 0) {
        free(open.v);
        return;
    }
    for (int i = 0; i < 3; i++) {
        values[i] = crier_pg_array_end(&hub->cred[i]);
        lengths[i] = (int)hub->cred[i].len;
    }
    /* the positions (1-based, in list order) of the streams to end */
    res = PQexecParams(hub->query,
                       "SELECT s.i FROM unnest($1::bigint[], $2::text[], $3::text[]) WITH ORDINALITY"
                       "   AS s(key_id, tenant, secret, i)"
                       " WHERE CASE WHEN s.key_id > 0 THEN NOT EXISTS (SELECT 1 FROM crier.api_keys k"
                       "            WHERE k.id = s.key_id AND k.revoked_at IS NULL)"
                       "       ELSE NOT EXISTS (SELECT 1 FROM crier.api_tenants t"
                       "            WHERE t.tenant = s.tenant AND encode(t.secret, 'hex') = s.secret) END",
                       3, NULL, values, lengths, formats, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        crier_warn("http", "live feeds: the credentials check failed: %s", PQresultErrorMessage(res));
    pthread_mutex_lock(&hub->lock);
    for (int row = 0; PQresultStatus(res) == PGRES_TUPLES_OK && row < PQntuples(res); row++) {
        long i = atol(PQgetvalue(res, row, 0)) - 1;
        if (i < 0 || (size_t)i >= open.n || open.v[i]->ending)
            continue;
        crier_http_stream *st = open.v[i];
        crier_info("http", "live feed of %s/%s ended: its credential was revoked", st->tenant, st->user);
        stream_end_with(st, "revoked", "credential_revoked",
                        "the API key that opened this stream was revoked, or the tenant's secret "
                        "was rotated; reconnect with a valid credential (and last_event_id)",
                        resume);
    }
    pthread_mutex_unlock(&hub->lock);
    PQclear(res);
    for (size_t i = 0; i < open.n; i++)
        stream_unref(open.v[i]);
    free(open.v);
}

static void hub_keepalive(crier_http_streams *hub, stream_list *resume)
{
    pthread_mutex_lock(&hub->lock);
    for (crier_http_stream *st = hub->streams; st; st = st->next)
        if (st->out.len == st->out_pos && stream_put(st, ":\n\n", 3))
            stream_list_add(resume, st);
    pthread_mutex_unlock(&hub->lock);
}

static void *hub_main(void *arg)
{
    crier_http_streams *hub = arg;
    stream_list resume = {0}, dirty = {0};
    double next_keepalive = crier_clock_s() + hub->keepalive;

    for (;;) {
        struct pollfd fds[2] = {{hub->wake[0], POLLIN, 0}, {-1, POLLIN, 0}};
        double now = crier_clock_s(), until = next_keepalive;
        bool stopping;

        pthread_mutex_lock(&hub->lock);
        stopping = hub->stopping;
        pthread_mutex_unlock(&hub->lock);
        if (stopping)
            break;
        if (!hub->listen)
            hub_connect(hub);
        if (!hub->listen && hub->reconnect_at < until)
            until = hub->reconnect_at;
        if (hub->listen)
            fds[1].fd = PQsocket(hub->listen);

        /* update the dirty streams (outside the lock: queries take time) */
        if (now < hub->retry_at && hub->retry_at < until)
            until = hub->retry_at;
        pthread_mutex_lock(&hub->lock);
        for (crier_http_stream *st = hub->streams; st && hub->listen && now >= hub->retry_at;
             st = st->next)
            if (st->dirty && !st->ending && !atomic_load(&st->closed))
                stream_list_add(&dirty, st);
        pthread_mutex_unlock(&hub->lock);
        for (size_t i = 0; i < dirty.n; i += STREAM_UPDATE_BATCH) {
            size_t n = dirty.n - i < STREAM_UPDATE_BATCH ? dirty.n - i : STREAM_UPDATE_BATCH;
            if (hub->query && !hub_update(hub, dirty.v + i, n, &resume) &&
                PQstatus(hub->query) != CONNECTION_OK)
                hub_disconnect(hub, PQerrorMessage(hub->query));
        }
        for (size_t i = 0; i < dirty.n; i++)
            stream_unref(dirty.v[i]);
        dirty.n = 0;
        stream_list_resume(&resume);

        if (now >= next_keepalive) {
            hub_keepalive(hub, &resume);
            stream_list_resume(&resume);
            next_keepalive = now + hub->keepalive;
        }
        if (now >= hub->next_cred_check && hub->query) {
            hub_check_credentials(hub, &resume);
            stream_list_resume(&resume);
            hub->next_cred_check = now + hub->keepalive;
        }
        long long next_expiry = hub_expire(hub, &resume);
        stream_list_resume(&resume);
        if (next_expiry && crier_clock_s() + (double)(next_expiry - (long long)time(NULL)) < until)
            until = crier_clock_s() + (double)(next_expiry - (long long)time(NULL));
        hub_reap(hub);

        int timeout = (int)((until - crier_clock_s()) * 1000) + 1;
        if (timeout < 0)
            timeout = 0;
        int n = poll(fds, fds[1].fd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR) {
            crier_error("http", "live feeds: poll failed: %s", strerror(errno));
            break;
        }
        if (fds[0].revents & POLLIN) {
            char buf[64];
            while (read(hub->wake[0], buf, sizeof buf) > 0)
                ;
        }
        if (hub->listen && (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) &&
            !hub_read_notices(hub))
            hub_disconnect(hub, PQerrorMessage(hub->listen));
    }
    free(resume.v);
    free(dirty.v);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Start, stop, metrics
 */

crier_http_streams *crier_http_streams_start(const char *conninfo, double keepalive, char *err,
                                             size_t err_len)
{
    crier_http_streams *hub = calloc(1, sizeof *hub);
    if (!hub || !(hub->conninfo = strdup(conninfo))) {
        free(hub);
        crier_set_error(err, err_len, "out of memory");
        return NULL;
    }
    hub->keepalive = keepalive > 0 ? keepalive : 15.0;
    pthread_mutex_init(&hub->lock, NULL);
    if (pipe(hub->wake) < 0) {
        crier_set_error(err, err_len, "cannot create a pipe for the live feeds: %s",
                        strerror(errno));
        hub->wake[0] = hub->wake[1] = -1;
        crier_http_streams_stop(hub);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(hub->wake[i], F_SETFL, O_NONBLOCK);
        fcntl(hub->wake[i], F_SETFD, FD_CLOEXEC);
    }
    if (pthread_create(&hub->thread, NULL, hub_main, hub) != 0) {
        crier_set_error(err, err_len, "cannot start the live feeds' thread");
        crier_http_streams_stop(hub);
        return NULL;
    }
    hub->started = true;
    return hub;
}

void crier_http_streams_stop(crier_http_streams *hub)
{
    if (!hub)
        return;
    pthread_mutex_lock(&hub->lock);
    hub->stopping = true;
    pthread_mutex_unlock(&hub->lock);
    if (hub->started) {
        stream_wake(hub);
        pthread_join(hub->thread, NULL);
    }
    /* the daemon has stopped: every response is gone, or never came */
    while (hub->streams) {
        crier_http_stream *st = hub->streams;
        hub->streams = st->next;
        stream_unref(st);
    }
    if (hub->listen)
        PQfinish(hub->listen);
    if (hub->query)
        PQfinish(hub->query);
    for (int i = 0; i < 2; i++)
        if (hub->wake[i] >= 0)
            close(hub->wake[i]);
    crier_pg_array_free(&hub->users);
    for (int i = 0; i < 3; i++) {
        crier_pg_array_free(&hub->cred[i]);
        crier_pg_array_free(&hub->batch[i]);
    }
    pthread_mutex_destroy(&hub->lock);
    free(hub->conninfo);
    free(hub);
}

void crier_http_streams_metrics(crier_http_streams *hub, crier_json_buf *b)
{
    if (!hub)
        return;
    pthread_mutex_lock(&hub->lock);
    crier_json_buf_printf(
        b,
        "# HELP crier_http_streams_open Live feed streams (Server-Sent Events) open now.\n"
        "# TYPE crier_http_streams_open gauge\ncrier_http_streams_open %ld\n"
        "# HELP crier_http_streams_opened_total Live feed streams opened.\n"
        "# TYPE crier_http_streams_opened_total counter\ncrier_http_streams_opened_total %llu\n"
        "# HELP crier_http_stream_items_total Feed items sent on live streams.\n"
        "# TYPE crier_http_stream_items_total counter\ncrier_http_stream_items_total %llu\n"
        "# HELP crier_http_stream_resyncs_total Resync events sent (too many changes, or a "
        "membership change).\n"
        "# TYPE crier_http_stream_resyncs_total counter\ncrier_http_stream_resyncs_total %llu\n"
        "# HELP crier_http_stream_updates_total Stream updates read from the database.\n"
        "# TYPE crier_http_stream_updates_total counter\ncrier_http_stream_updates_total %llu\n"
        "# HELP crier_http_stream_notifications_total Announcements received on crier_feed.\n"
        "# TYPE crier_http_stream_notifications_total counter\n"
        "crier_http_stream_notifications_total %llu\n"
        "# HELP crier_http_streams_listening 1 while the live feeds listen on crier_feed.\n"
        "# TYPE crier_http_streams_listening gauge\ncrier_http_streams_listening %d\n",
        hub->open, hub->opened, hub->items_sent, hub->resyncs, hub->updates, hub->notifies,
        hub->listening ? 1 : 0);
    pthread_mutex_unlock(&hub->lock);
}
