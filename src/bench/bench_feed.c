/* bench_feed.c — `crier bench feed`: how fast a person's feed answers through
 * the HTTP API with a million feed items, beside the same SQL functions called
 * directly (the baseline): the first page, a page deep in a heavy person's
 * feed, the unread count and mark-all-read, p50 and p99 of each.
 *
 * The dataset is built once in SQL (generate_series, not the fan-out engine)
 * in its own database and reused while its sizes match:
 *   - people p0 … p(P-1) in three tiers: heavy (P/1000 people holding half the
 *     direct items, thousands each), medium (the next 0.9% of people, a
 *     quarter of the items, hundreds each) and light (everyone else, the last
 *     quarter: a few each, exponentially distributed, some none);
 *   - N feed items (each with its notification, five notifications per event)
 *     and A audience items (one event each: 1 in 25 to the tenant-wide
 *     audience "all", the rest to team audiences, 1 in 50 backfilling), all
 *     interleaved in one random order of positions over 90 days;
 *   - memberships: everyone in "all" and in one to three of P/100 teams, some
 *     joined late, some left (a third of those joined again);
 *   - watermarks: 30% of the people marked all read (crier.feed_mark_all)
 *     when 90% of the items existed (a third of them up to a head cursor), 10%
 *     marked all seen; explicit states on 8% of direct items (read, seen,
 *     marked unread, archived) and on the latest tenant-wide announcement for
 *     a fifth of the people.
 * The explicit states and watermarks are kept in copies and put back before
 * every run (mark-all-read changes them), so each run starts from the same
 * state.
 *
 * Per run and operation, the HTTP side (a child `crier serve --http`, one
 * libcurl easy handle with keep-alive per client thread) and the SQL side (the
 * statements the API runs, over libpq, each in BEGIN … COMMIT) answer the same
 * list of people, in alternating order from run to run, after a warm-up. */
#define _GNU_SOURCE
#include "base64.h"
#include "alloc.h"
#include "bench.h"
#include "bench_util.h"
#include "cli.h"
#include "clock.h"
#include "http_auth.h"
#include "http_feed_sql.h"
#include "json_writer.h"
#include "log.h"
#include "migrate.h"

#include <curl/curl.h>
#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char bench_feed_help[] =
    "usage: crier bench feed [--people P] [--notifications N] [--audience-items A]\n"
    "                        [--requests R] [--repeat K] [--clients C] [--deep D]\n"
    "                        [--deep-people H] [--rebuild] [--explain] [--keep] [--json]\n"
    "                        [--database URL | --data-dir DIR] [--lua-dir DIR]\n"
    "\n"
    "Times a person's feed through the HTTP API of a child `crier serve --http`\n"
    "(API key, keep-alive connections) and, as the baseline, the same statements\n"
    "over libpq in BEGIN ... COMMIT (crier.feed, crier.feed_counts,\n"
    "crier.feed_mark_all; no HTTP, no authentication). Operations, R requests\n"
    "each per side and run, after a warm-up:\n"
    "  first_page          GET /v1/feed?user=X&limit=20, X a random person\n"
    "  deep_page           the page of 20 that starts D items down the feed of one\n"
    "                      of H heavy people (its cursor found by walking the pages)\n"
    "  unread_count        GET /v1/feed/counts?user=X, X a random person\n"
    "  heavy_unread_count  the same for a random heavy person (thousands of items)\n"
    "  mark_all_read       POST /v1/feed/read-all?user=X, X a random person (the\n"
    "                      answer carries the new counts, as the API's does)\n"
    "Prints p50 and p99 in ms of both sides and their ratio (HTTP / SQL): medians\n"
    "over the K runs, with min/max and spread, and the 1-minute load average.\n"
    "\n"
    "The dataset (P people, N feed items with their notifications and events, A\n"
    "audience items, memberships, watermarks and per-item states; see\n"
    "docs/BENCHMARKS.md) is built in SQL in a database crier_bench_feed on the\n"
    "embedded cluster and kept there: the next invocation with the same sizes\n"
    "reuses it. With --database (or CRIER_DATABASE_URL) it is built in that\n"
    "database instead, EMPTYING crier's event, notification and feed tables there;\n"
    "it refuses one holding events of a tenant other than 'bench'. The rules are\n"
    "generated (--rules is ignored).\n"
    "\n"
    "options:\n"
    "  --people P          people, p0 ... p(P-1), at least 1000 (default 100000)\n"
    "  --notifications N   feed items, at least P (default 1000000)\n"
    "  --audience-items A  audience items, at least 100 (default 5000)\n"
    "  --requests R        timed requests per operation, side and run (default 2000)\n"
    "  --repeat K          runs (default 3)\n"
    "  --clients C         client threads per side, each with its own HTTP or\n"
    "                      PostgreSQL connection (default 1)\n"
    "  --deep D            how many items down the deep page starts (default 1000)\n"
    "  --deep-people H     heavy people whose deep page is asked for (default 20,\n"
    "                      at most P/1000: the heavy people)\n"
    "  --rebuild           build the dataset again (on the embedded cluster: in a\n"
    "                      fresh database)\n"
    "  --explain           print the plans of the statements the functions run\n"
    "                      (auto_explain: nested statements, ANALYZE, BUFFERS) for\n"
    "                      a light person, a heavy one and one with a watermark;\n"
    "                      times nothing\n"
    "  --keep              keep the work directory (rules, serve log); it is kept\n"
    "                      anyway when the bench fails\n"
    "  --json              print one JSON object instead of the table\n"
    "  --database URL      libpq connection string (default: $CRIER_DATABASE_URL,\n"
    "                      else the embedded cluster)\n"
    "  --data-dir DIR      embedded cluster directory (default: $CRIER_DATA_DIR or\n"
    "                      ./.crier/pg)\n"
    "  --lua-dir DIR       the crier Lua library for crier serve\n";

/* The operations timed, in the order of a run (mark-all-read last: it changes
 * the states, which are put back after it). */
enum { OP_FIRST_PAGE, OP_DEEP_PAGE, OP_UNREAD_COUNT, OP_HEAVY_COUNT, OP_MARK_ALL_READ, OP_COUNT };

static const char *const op_names[OP_COUNT] = {"first_page", "deep_page", "unread_count",
                                               "heavy_unread_count", "mark_all_read"};

#define FEED_TENANT "bench"
#define FEED_DATASET_VERSION 2
#define FEED_PAGE_LIMIT 20  /* the API's default page */
#define FEED_WALK_LIMIT 100 /* pages walked to find the deep cursors */
#define FEED_SCHEMA "crier_bench_feed"

/* The baseline runs the HTTP API's statements (CRIER_HTTP_SQL_FEED_*,
 * http_feed_sql.h), so that it asks PostgreSQL exactly what the API asks; the
 * first page is prepared on each connection as the API does. A page asks for
 * one row more than it shows (whether another page follows). */
#define FEED_FIRST_PAGE_STMT "crier_bench_first_page"

typedef struct {
    int people, notifications, audience_items;
    int requests, repeat, clients, deep, deep_people;
    bool json, keep, rebuild, explain;
} feed_opts;

/* A heavy person's page deep down: the cursor the API handed out for it and
 * the position inside it (for the SQL side). */
typedef struct {
    char user[24];
    char cursor[160];
    char before[24];
} feed_deep;

/* Figures of one run; NAN where unknown. */
typedef struct {
    double http_p50[OP_COUNT], http_p99[OP_COUNT], sql_p50[OP_COUNT], sql_p99[OP_COUNT];
    double load; /* 1-minute load average at the end of the run */
} feed_run;

/* Everything the bench started, so that every exit path can stop it. */
typedef struct {
    feed_opts o;
    crier_cli cli;
    char dir[256]; /* work directory (mkdtemp) */
    char rules_dir[300];
    char conninfo[2400];
    char base_url[64];
    char auth_header[96]; /* "Authorization: Bearer crk_…" */
    int port, heavy;      /* heavy: people p0 … p(heavy-1) */
    pid_t serve_pid;
    PGconn *conn;
    feed_deep *deep;
    double build_s; /* NAN when the dataset was reused */
} feed_ctx;

/* Runs a query returning one text value into out ("" for no row or NULL).
 * Returns 0 or -1 (message printed). */
static int feed_query_text(PGconn *conn, const char *sql, char *out, size_t out_len)
{
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("bench", "%.300s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    snprintf(out, out_len, "%s", PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return 0;
}

/* splitmix64: the bench's random people, the same sequence for both sides. */
static uint64_t feed_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------ */
/* The dataset */

/* Expands the {NAME} placeholders of a dataset statement (sizes and derived
 * bounds) into out. Returns 0, or -1 when out is too small or a name unknown. */
static int feed_sql_expand(const feed_opts *o, const char *tmpl, char *out, size_t out_len)
{
    long long people = o->people, n = o->notifications, a = o->audience_items;
    long long heavy = people / 1000 > 0 ? people / 1000 : 1;
    long long medium = people / 100 > heavy ? people / 100 : heavy + 1;
    const struct {
        const char *name;
        long long value;
    } vars[] = {
        {"P", people},
        {"N", n},
        {"A", a},
        {"HEAVY", heavy},
        {"MEDIUM", medium}, /* people below this index are heavy or medium */
        {"TEAMS", people / 100 > 0 ? people / 100 : 1},
        {"CUT", (n + a) * 9 / 10}, /* positions written before the watermarks */
        {"EDIRECT", (n + 4) / 5},  /* events of the direct items */
        {"VERSION", FEED_DATASET_VERSION},
    };
    size_t len = 0;

    for (const char *p = tmpl; *p;) {
        const char *end = *p == '{' ? strchr(p, '}') : NULL;
        size_t i = 0;
        if (end) {
            for (i = 0; i < sizeof vars / sizeof vars[0]; i++)
                if (strlen(vars[i].name) == (size_t)(end - p - 1) &&
                    !strncmp(vars[i].name, p + 1, (size_t)(end - p - 1)))
                    break;
            if (i == sizeof vars / sizeof vars[0])
                return -1;
            int w = snprintf(out + len, out_len - len, "%lld", vars[i].value);
            if (w < 0 || (size_t)w >= out_len - len)
                return -1;
            len += (size_t)w;
            p = end + 1;
            continue;
        }
        if (len + 1 >= out_len)
            return -1;
        out[len++] = *p++;
    }
    out[len] = '\0';
    return 0;
}

/* The timestamp of a position: 90 days ago up to now. */
#define FEED_AT "now() - interval '90 days' * (1 - pos::float8 / ({N} + {A}))"

#define FEED_DIRECT_CONTENT                                                                        \
    "jsonb_build_object('title', 'p' || ((hashint8extended(pos, 14) & 1048575) % {P})"             \
    " || ' commented on c' || ((dnum - 1) / 5 + 1), 'body', 'Comment ' || dnum ||"                 \
    " ': the quick brown fox jumps over the lazy dog.', 'url', '/c/' || ((dnum - 1) / 5 + 1))"
#define FEED_AUDIENCE_CONTENT                                                                      \
    "jsonb_build_object('title', 'Announcement ' || anum || ' to ' || audience,"                   \
    " 'body', 'Release notes, maintenance windows and other news.')"

#define FEED_INSERT_DIRECT(where)                                                                  \
    "INSERT INTO crier.feed_items (id, tenant, recipient_id, notification_id, event_type,"         \
    " content, created_at)"                                                                        \
    " SELECT pos, '" FEED_TENANT "', 'p' || person, dnum, 'bench.comment', " FEED_DIRECT_CONTENT   \
    ", at FROM " FEED_SCHEMA ".plan WHERE person IS NOT NULL AND " where
#define FEED_INSERT_AUDIENCE(where)                                                                \
    "INSERT INTO crier.audience_items (id, tenant, audience, event_id, event_type, content,"       \
    " backfill, created_at)"                                                                       \
    " SELECT pos, '" FEED_TENANT                                                                   \
    "', audience, {EDIRECT} + anum, 'bench.announcement', " FEED_AUDIENCE_CONTENT                  \
    ", backfill, at FROM " FEED_SCHEMA ".plan WHERE person IS NULL AND " where

/* The steps of the build, in order: what each does (for the progress line)
 * and its statement. */
static const struct {
    const char *what, *sql;
} feed_build_steps[] = {
    {"empty crier's tables",
     "TRUNCATE crier.events, crier.notifications, crier.feed_items, crier.audience_items,"
     " crier.memberships, crier.feed_states, crier.feed_watermarks CASCADE"},
    {NULL, "ALTER SEQUENCE crier.feed_position RESTART"},
    {NULL, "DROP SCHEMA IF EXISTS " FEED_SCHEMA " CASCADE"},
    {NULL, "CREATE SCHEMA " FEED_SCHEMA},
    /* items per person: each tier's share split by weights (uniform 0.5-1.5
     * for heavy and medium people, exponential for light ones), rounded on
     * the running sum so that the shares add up exactly. Random values come
     * from hashes (hashint8extended), so every build is the same dataset. */
    {"people", "CREATE UNLOGGED TABLE " FEED_SCHEMA ".people AS"
               " WITH p AS (SELECT g AS person,"
               "   CASE WHEN g < {HEAVY} THEN 0 WHEN g < {MEDIUM} THEN 1 ELSE 2 END AS tier,"
               "   ((hashint8extended(g, 1) & 281474976710655)::float8 + 1) / 281474976710656 AS u"
               "   FROM generate_series(0, {P} - 1) g),"
               " w AS (SELECT person, tier, CASE WHEN tier = 2 THEN -ln(u) ELSE 0.5 + u END AS w"
               "   FROM p),"
               " c AS (SELECT person, tier, sum(w) OVER (PARTITION BY tier ORDER BY person) AS cw,"
               "   sum(w) OVER (PARTITION BY tier) AS tw,"
               "   CASE tier WHEN 0 THEN {N} / 2 WHEN 1 THEN {N} / 4"
               "     ELSE {N} - {N} / 2 - {N} / 4 END AS share"
               "   FROM w)"
               " SELECT person, tier, (round(share * cw / tw) - round(share * coalesce(lag(cw)"
               "   OVER (PARTITION BY tier ORDER BY person), 0) / tw))::int AS n FROM c"},
    /* every item in one random order of positions: direct items (dnum numbers
     * them: notification dnum, event (dnum - 1) / 5 + 1) and audience items
     * (anum: event {EDIRECT} + anum) */
    {"positions",
     "CREATE UNLOGGED TABLE " FEED_SCHEMA ".plan AS"
     " SELECT pos, person, audience, backfill,"
     "   CASE WHEN person IS NOT NULL THEN row_number() OVER (PARTITION BY person IS NULL"
     "     ORDER BY pos) END AS dnum,"
     "   CASE WHEN person IS NULL THEN row_number() OVER (PARTITION BY person IS NULL"
     "     ORDER BY pos) END AS anum, " FEED_AT " AS at"
     " FROM (SELECT row_number() OVER (ORDER BY h) AS pos, person, audience, backfill FROM ("
     "   SELECT hashint8extended(person::bigint * 4294967296 + k, 2) AS h, person,"
     "     NULL::text AS audience, false AS backfill"
     "   FROM " FEED_SCHEMA ".people, generate_series(1, n) k"
     "   UNION ALL"
     "   SELECT hashint8extended(a, 3), NULL, CASE WHEN a % 25 = 0 THEN 'all'"
     "     ELSE 'team:' || (hashint8extended(a, 4) & 1048575) % {TEAMS} END, a % 50 = 7"
     "   FROM generate_series(1, {A}) a) x) y"},
    {"events",
     "INSERT INTO crier.events (id, tenant, event_type, entity_id, payload, dedupe_key, state,"
     " attempts, available_at, processed_at, created_at, rules_version)"
     " SELECT e, '" FEED_TENANT "', t, ent, jsonb_build_object('n', e), t || ':' || ent, 'done', 1,"
     " at, at, at, 'bench-feed'"
     " FROM (SELECT (dnum - 1) / 5 + 1 AS e, 'bench.comment' AS t,"
     "   'c' || ((dnum - 1) / 5 + 1) AS ent, min(at) AS at"
     "   FROM " FEED_SCHEMA ".plan WHERE person IS NOT NULL GROUP BY 1"
     "   UNION ALL"
     "   SELECT {EDIRECT} + anum, 'bench.announcement', 'a' || anum, at"
     "   FROM " FEED_SCHEMA ".plan WHERE person IS NULL) x"},
    {NULL, "SELECT setval('crier.events_id_seq', {EDIRECT} + {A})"},
    {"notifications",
     "INSERT INTO crier.notifications (id, key_hash, key, tenant, event_id, event_type,"
     " entity_id, recipient_id, rules_version, created_at)"
     " SELECT dnum, md5('bench-feed:' || dnum)::uuid,"
     " 'bench.comment:c' || ((dnum - 1) / 5 + 1) || ':p' || person, '" FEED_TENANT "',"
     " (dnum - 1) / 5 + 1, 'bench.comment', 'c' || ((dnum - 1) / 5 + 1), 'p' || person,"
     " 'bench-feed', at FROM " FEED_SCHEMA ".plan WHERE person IS NOT NULL"},
    {NULL, "SELECT setval('crier.notifications_id_seq', {N})"},
    /* everyone in "all", 15% of them joined late; one to three teams each,
     * 15% joined late (first half of the positions), 3% left (second half) */
    {"memberships",
     "INSERT INTO crier.memberships (tenant, audience, recipient_id, joined_at, left_at,"
     " joined_position, left_position)"
     " SELECT '" FEED_TENANT "', m.audience, 'p' || m.person, j.at, l.at, m.jpos, m.lpos FROM ("
     "   SELECT person, 'all' AS audience,"
     "     CASE WHEN hashint8extended(person, 5) & 1023 < 154"
     "       THEN (hashint8extended(person, 6) & 1048575) * ({N} + {A}) / 1048576"
     "       ELSE 0 END AS jpos,"
     "     NULL::bigint AS lpos"
     "   FROM generate_series(0, {P} - 1) person"
     "   UNION ALL"
     "   SELECT person, 'team:' || ((hashint8extended(person, 7) & 1048575) + k * 7919) % {TEAMS},"
     "     CASE WHEN hashint8extended(person * 4 + k, 8) & 1023 < 154"
     "       THEN (hashint8extended(person * 4 + k, 9) & 1048575) * ({N} + {A}) / 2097152"
     "       ELSE 0 END,"
     "     CASE WHEN hashint8extended(person * 4 + k, 10) & 1023 < 31 THEN ({N} + {A}) / 2"
     "       + (hashint8extended(person * 4 + k, 11) & 1048575) * ({N} + {A}) / 2097152 END"
     "   FROM generate_series(0, {P} - 1) person, generate_series(0, 2) k"
     "   WHERE k <= (hashint8extended(person, 12) & 1023) % 3) m"
     " LEFT JOIN " FEED_SCHEMA ".plan j ON j.pos = greatest(m.jpos, 1)"
     " LEFT JOIN " FEED_SCHEMA ".plan l ON l.pos = m.lpos"},
    {NULL,
     "INSERT INTO crier.memberships (tenant, audience, recipient_id, joined_at, joined_position)"
     " SELECT m.tenant, m.audience, m.recipient_id, p.at, p.pos FROM crier.memberships m"
     " JOIN " FEED_SCHEMA ".plan p ON p.pos = m.left_position + ({N} + {A} - m.left_position) / 2"
     " WHERE m.left_position IS NOT NULL AND hashint8extended(m.left_position, 13) % 3 = 0"},
    {"feed items (90%)", FEED_INSERT_DIRECT("pos <= {CUT}")},
    {NULL, FEED_INSERT_AUDIENCE("pos <= {CUT}")},
    {NULL, "SELECT setval('crier.feed_position', {CUT})"},
    /* the watermark rows of the people who will mark all read or seen, as
     * crier.feed_mark_all's first statement makes them, and statistics, so
     * that the calls below are planned for this size (a connection caches
     * generic plans: planned while the table was nearly empty, each call would
     * scan the whole table and the step would take minutes) */
    {"analyze",
     "INSERT INTO crier.feed_watermarks (tenant, recipient_id)"
     " SELECT '" FEED_TENANT "', 'p' || g FROM generate_series(0, {P} - 1) g"
     " WHERE hashint8extended(g, 15) & 1023 < 307 OR hashint8extended(g, 18) & 1023 < 102"},
    {NULL, "ANALYZE crier.feed_items, crier.audience_items, crier.memberships, crier.feed_states,"
           " crier.feed_watermarks"},
    {"watermarks",
     "SELECT count(crier.feed_mark_all('" FEED_TENANT "', 'p' || g, 'read',"
     "   CASE WHEN hashint8extended(g, 16) % 3 = 0"
     "     THEN {CUT} - (hashint8extended(g, 17) & 65535) END))"
     " FROM generate_series(0, {P} - 1) g WHERE hashint8extended(g, 15) & 1023 < 307"},
    {NULL, "SELECT count(crier.feed_mark_all('" FEED_TENANT "', 'p' || g, 'seen'))"
           " FROM generate_series(0, {P} - 1) g WHERE hashint8extended(g, 18) & 1023 < 102"},
    {"feed items (10%)", FEED_INSERT_DIRECT("pos > {CUT}")},
    {NULL, FEED_INSERT_AUDIENCE("pos > {CUT}")},
    {NULL, "SELECT setval('crier.feed_position', {N} + {A})"},
    /* 8% of direct items: read (70%), seen (15%), marked unread (10%: some
     * below a watermark), archived (5%) */
    {"states",
     "INSERT INTO crier.feed_states (tenant, recipient_id, item_id, read, seen, archived)"
     " SELECT '" FEED_TENANT "', 'p' || person, pos,"
     "   CASE WHEN r < 70 THEN true WHEN r >= 85 AND r < 95 THEN false END,"
     "   CASE WHEN r < 85 THEN true END, CASE WHEN r >= 95 THEN true END"
     " FROM (SELECT pos, person, (hashint8extended(pos, 20) & 1048575) % 100 AS r"
     "   FROM " FEED_SCHEMA ".plan"
     "   WHERE person IS NOT NULL AND (hashint8extended(pos, 19) & 1048575) % 100 < 8) x"},
    {NULL, "INSERT INTO crier.feed_states (tenant, recipient_id, item_id, read, seen)"
           " SELECT '" FEED_TENANT "', 'p' || g,"
           "   (SELECT max(pos) FROM " FEED_SCHEMA ".plan WHERE audience = 'all'), true, true"
           " FROM generate_series(0, {P} - 1) g WHERE hashint8extended(g, 21) % 5 = 0"},
    {"copies of the states",
     "CREATE TABLE " FEED_SCHEMA ".feed_states0 AS SELECT * FROM crier.feed_states"},
    {NULL, "CREATE TABLE " FEED_SCHEMA ".feed_watermarks0 AS SELECT * FROM crier.feed_watermarks"},
    {NULL, "DROP TABLE " FEED_SCHEMA ".plan"},
    {"vacuum and analyze",
     "VACUUM (ANALYZE) crier.events, crier.notifications, crier.feed_items, crier.audience_items,"
     " crier.memberships, crier.feed_states, crier.feed_watermarks, " FEED_SCHEMA ".people"},
    {NULL, "CHECKPOINT"},
};

/* Builds the dataset (see the top of this file). Progress goes to stderr. */
static int feed_build(feed_ctx *b)
{
    char sql[8192];
    double start = crier_clock_s(), t = start, total[1];
    const char *what = NULL;

    fprintf(stderr,
            "bench feed: building the dataset (%d people, %d feed items, %d audience items):",
            b->o.people, b->o.notifications, b->o.audience_items);
    /* (not synchronous_commit = off: VACUUM cannot mark a page all-visible
     * while the commit of its rows is not flushed, and index-only scans would
     * then read the heap for the newest items) */
    if (crier_bench_exec(b->conn, "SET work_mem = '256MB'") < 0 ||
        crier_bench_exec(b->conn, "SET maintenance_work_mem = '512MB'") < 0)
        return -1;
    for (size_t i = 0; i < sizeof feed_build_steps / sizeof feed_build_steps[0]; i++) {
        if (feed_build_steps[i].what) {
            if (what)
                fprintf(stderr, " %s %.1fs,", what, crier_clock_s() - t);
            what = feed_build_steps[i].what;
            t = crier_clock_s();
        }
        if (feed_sql_expand(&b->o, feed_build_steps[i].sql, sql, sizeof sql) < 0) {
            fputc('\n', stderr);
            crier_cli_error("bench", "dataset step %zu: statement too long", i);
            return -1;
        }
        if (crier_bench_exec(b->conn, sql) < 0) {
            fputc('\n', stderr);
            return -1;
        }
        if (feed_build_steps[i].what && !strcmp(feed_build_steps[i].what, "people")) {
            /* the people's items must add up to N exactly */
            if (crier_bench_query_numbers(b->conn, "SELECT sum(n) FROM " FEED_SCHEMA ".people",
                                          total, 1) < 0)
                return -1;
            if (total[0] != b->o.notifications) {
                fputc('\n', stderr);
                crier_cli_error("bench", "the people hold %.0f items, not %d", total[0],
                                b->o.notifications);
                return -1;
            }
        }
    }
    b->build_s = crier_clock_s() - start;
    fprintf(stderr, " %s %.1fs; %.1f s in all\n", what, crier_clock_s() - t, b->build_s);
    if (feed_sql_expand(&b->o,
                        "CREATE TABLE " FEED_SCHEMA ".dataset AS SELECT {VERSION} AS version,"
                        " {P} AS people, {N} AS notifications, {A} AS audience_items,"
                        " now() AS built_at, ",
                        sql, sizeof sql) < 0)
        return -1;
    snprintf(sql + strlen(sql), sizeof sql - strlen(sql), "%.3f::float8 AS build_seconds",
             b->build_s);
    return crier_bench_exec(b->conn, sql);
}

/* Sets *ready when the database holds the dataset of these sizes (and of
 * this version of the generator), whole. Returns 0 or -1 (message printed). */
static int feed_dataset_ready(feed_ctx *b, bool *ready)
{
    char sql[1024];
    double v[4];

    *ready = false;
    if (crier_bench_query_numbers(b->conn,
                                  "SELECT (to_regclass('" FEED_SCHEMA ".dataset') IS NOT NULL"
                                  " AND to_regclass('" FEED_SCHEMA ".feed_states0') IS NOT NULL"
                                  " AND to_regclass('" FEED_SCHEMA ".feed_watermarks0') IS NOT NULL"
                                  " AND to_regclass('" FEED_SCHEMA ".people') IS NOT NULL)::int",
                                  v, 1) < 0)
        return -1;
    if (v[0] != 1)
        return 0;
    if (feed_sql_expand(&b->o,
                        "SELECT count(*) FROM " FEED_SCHEMA ".dataset WHERE version = {VERSION}"
                        " AND people = {P} AND notifications = {N} AND audience_items = {A}",
                        sql, sizeof sql) < 0 ||
        crier_bench_query_numbers(b->conn, sql, v, 1) < 0)
        return -1;
    if (v[0] != 1)
        return 0;
    if (crier_bench_query_numbers(
            b->conn,
            "SELECT (SELECT count(*) FROM crier.feed_items WHERE tenant = '" FEED_TENANT
            "'), (SELECT count(*) FROM crier.audience_items WHERE tenant = '" FEED_TENANT
            "'), (SELECT build_seconds FROM " FEED_SCHEMA ".dataset),"
            " (SELECT extract(epoch FROM now() - built_at) FROM " FEED_SCHEMA ".dataset)",
            v, 4) < 0)
        return -1;
    if (v[0] != b->o.notifications || v[1] != b->o.audience_items)
        return 0;
    fprintf(stderr,
            "bench feed: reusing the dataset (%d people, %d feed items, %d audience items; built "
            "%.0f minutes ago in %.1f s; --rebuild builds it again)\n",
            b->o.people, b->o.notifications, b->o.audience_items, v[3] / 60, v[2]);
    *ready = true;
    return 0;
}

/* Puts the explicit states and watermarks back as the build left them. */
static int feed_restore_states(PGconn *conn)
{
    static const char *const sqls[] = {
        "TRUNCATE crier.feed_states, crier.feed_watermarks",
        "INSERT INTO crier.feed_states SELECT * FROM " FEED_SCHEMA ".feed_states0",
        "INSERT INTO crier.feed_watermarks SELECT * FROM " FEED_SCHEMA ".feed_watermarks0",
        "VACUUM (ANALYZE) crier.feed_states, crier.feed_watermarks", NULL};
    for (const char *const *s = sqls; *s; s++)
        if (crier_bench_exec(conn, *s) < 0)
            return -1;
    return 0;
}

/* Opens the database (embedded: crier_bench_feed, created if missing, or
 * afresh with --rebuild; else the given one, if it holds no other tenant's
 * events), migrates it and connects. *fresh: nothing of an earlier build can
 * be there. */
static int feed_open_database(feed_ctx *b, crier_database *db, bool *fresh)
{
    return crier_bench_open_database(b->cli.database, b->cli.data_dir, db, "crier_bench_feed", true,
                                     b->o.rebuild, FEED_TENANT, b->conninfo, sizeof b->conninfo,
                                     &b->conn, fresh);
}

/* A new API key for the bench's tenant (earlier bench keys are deleted):
 * fills b->auth_header. */
static int feed_api_key(feed_ctx *b)
{
    char key[CRIER_API_KEY_LEN + 1], hash[65], hint[16];
    const char *values[3] = {hash, hint, NULL};
    PGresult *res;
    int ok;

    if (crier_auth_key_generate(key) < 0) {
        crier_cli_error("bench", "no randomness available to generate an API key");
        return -1;
    }
    crier_auth_key_hash_hex(key, strlen(key), hash);
    snprintf(hint, sizeof hint, "%.10s", key);
    if (crier_bench_exec(b->conn, "SELECT crier.api_tenant_secret('" FEED_TENANT "')") < 0 ||
        crier_bench_exec(b->conn, "DELETE FROM crier.api_keys WHERE tenant = '" FEED_TENANT
                                  "' AND name = 'crier bench feed'") < 0)
        return -1;
    res = PQexecParams(b->conn,
                       "INSERT INTO crier.api_keys (tenant, name, key_hash, hint)"
                       " VALUES ('" FEED_TENANT "', 'crier bench feed', decode($1, 'hex'), $2)",
                       2, NULL, values, NULL, NULL, 0);
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        crier_cli_error("bench", "cannot store the API key: %s", PQresultErrorMessage(res));
    PQclear(res);
    snprintf(b->auth_header, sizeof b->auth_header, "Authorization: Bearer %s", key);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* crier serve */

/* Writes the generated rules: the two event types of the dataset (a comment
 * in the commenter's followers' feeds, an announcement read by an audience).
 * Nothing is emitted while the bench runs; serve only needs valid rules. */
static int feed_write_rules(feed_ctx *b)
{
    static const char text[] =
        "-- Generated by crier bench feed: the event types of its dataset (the\n"
        "-- bench writes the items in SQL; nothing is emitted while it runs).\n"
        "local crier = require \"crier\"\n"
        "\n"
        "crier.event_type \"bench.comment\" { payload = { n = \"integer\" } }\n"
        "crier.rule \"bench.comment\" {\n"
        "    recipients = function() return {} end,\n"
        "    channels = { \"feed\" },\n"
        "    feed = { title = \"comment {{ payload.n }}\" },\n"
        "}\n"
        "\n"
        "crier.event_type \"bench.announcement\" { payload = { n = \"integer\" } }\n"
        "crier.rule \"bench.announcement\" {\n"
        "    mode = \"read\",\n"
        "    audience = \"all\",\n"
        "    feed = { title = \"announcement {{ payload.n }}\" },\n"
        "}\n";
    char path[400];

    snprintf(b->rules_dir, sizeof b->rules_dir, "%s/rules", b->dir);
    if (mkdir(b->rules_dir, 0755) < 0) {
        crier_cli_error("bench", "cannot create %s: %s", b->rules_dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/bench.lua", b->rules_dir);
    return crier_bench_write_file(path, text);
}

/* libcurl's write callback: appends a response body to a crier_json_buf. */
static size_t feed_body_write(char *ptr, size_t size, size_t n, void *ud)
{
    crier_json_buf_add(ud, ptr, size * n);
    return size * n;
}

/* Empties a body, keeping its memory. */
static void feed_body_reset(crier_json_buf *body)
{
    body->len = 0;
    if (body->data)
        body->data[0] = '\0';
}

/* One HTTP client: an easy handle (keep-alive across its requests) with the
 * bench's Authorization header. */
typedef struct {
    CURL *curl;
    struct curl_slist *headers;
    crier_json_buf body;
} feed_http;

static int feed_http_open(feed_http *h, const char *auth_header)
{
    memset(h, 0, sizeof *h);
    h->curl = curl_easy_init();
    if (auth_header)
        h->headers = curl_slist_append(NULL, auth_header);
    if (!h->curl || (auth_header && !h->headers))
        return -1;
    curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, feed_body_write);
    curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &h->body);
    curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->curl, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h->curl, CURLOPT_TCP_NODELAY, 1L);
    return 0;
}

static void feed_http_close(feed_http *h)
{
    if (h->curl)
        curl_easy_cleanup(h->curl);
    curl_slist_free_all(h->headers);
    crier_json_buf_free(&h->body);
    memset(h, 0, sizeof *h);
}

/* Sends one request (POST with an empty body when post); the body is in
 * h->body. Returns the HTTP status, or -1 with err set when no answer came. */
static long feed_http_do(feed_http *h, const char *url, bool post, char *err, size_t err_len)
{
    long status = 0;
    CURLcode rc;

    feed_body_reset(&h->body);
    curl_easy_setopt(h->curl, CURLOPT_URL, url);
    if (post) {
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE, 0L);
    } else {
        curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L);
    }
    rc = curl_easy_perform(h->curl);
    if (rc != CURLE_OK) {
        snprintf(err, err_len, "%.300s: %s", url, curl_easy_strerror(rc));
        return -1;
    }
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* Starts `crier serve --http` (this binary) on the bench database and waits
 * until GET /healthz answers 200. Its output goes to serve.log. Retention is
 * off: the dataset's events are up to 90 days old, and retention's first
 * pass, 5 s after the start, deleted most of them (and so the feed items'
 * events) when a slow run outlasted it. */
static int feed_serve_start(feed_ctx *b)
{
    char listen[32], log[400], url[128], err[512];
    char *argv[] = {"/proc/self/exe",   "serve",      "--database",        b->conninfo,
                    "--rules",          b->rules_dir, "--lua-dir",         (char *)b->cli.lua_dir,
                    "--no-migrate",     "--http",     listen,              "--retain-events",
                    "off",              "--retain-deliveries", "off",      NULL};
    feed_http h;

    b->port = crier_bench_free_port();
    if (!b->port) {
        crier_cli_error("bench", "no free TCP port on 127.0.0.1");
        return -1;
    }
    snprintf(listen, sizeof listen, "127.0.0.1:%d", b->port);
    snprintf(b->base_url, sizeof b->base_url, "http://127.0.0.1:%d", b->port);
    snprintf(log, sizeof log, "%s/serve.log", b->dir);
    b->serve_pid = crier_bench_spawn(argv, log);
    if (b->serve_pid < 0) {
        b->serve_pid = 0;
        return -1;
    }
    if (feed_http_open(&h, NULL) < 0) {
        feed_http_close(&h);
        return -1;
    }
    snprintf(url, sizeof url, "%s/healthz", b->base_url);
    for (double until = crier_clock_s() + 60; crier_clock_s() < until;
         crier_bench_sleep(0.05)) {
        int rc = crier_bench_wait(b->serve_pid, 0);
        if (rc >= 0) {
            b->serve_pid = 0;
            feed_http_close(&h);
            crier_cli_error("bench", "crier serve exited with status %d at start", rc);
            crier_bench_print_tail(log);
            return -1;
        }
        if (feed_http_do(&h, url, false, err, sizeof err) == 200) {
            feed_http_close(&h);
            return 0;
        }
    }
    feed_http_close(&h);
    crier_cli_error("bench", "crier serve's HTTP API did not answer on %s within 60 s", url);
    crier_bench_print_tail(log);
    return -1;
}

/* The value of "next_cursor" in a feed page, into out ("" when null).
 * Returns 0, or -1 when the body has none. */
static int feed_next_cursor(const char *body, char *out, size_t out_len)
{
    const char *p = body ? strstr(body, "\"next_cursor\":") : NULL;
    size_t n;

    if (!p)
        return -1;
    p += strlen("\"next_cursor\":");
    out[0] = '\0';
    if (*p != '"')
        return strncmp(p, "null", 4) ? -1 : 0;
    p++;
    n = strcspn(p, "\"");
    if (p[n] != '"' || n + 1 > out_len)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

/* Walks the feed of each of the first H heavy people, FEED_WALK_LIMIT items a
 * page, until D items are behind: that page's next cursor (and the position
 * it holds) is where the deep page starts. */
static int feed_find_deep(feed_ctx *b)
{
    char url[512], err[512];
    feed_http h;
    int rc = -1;

    b->deep = crier_xcalloc((size_t)b->o.deep_people, sizeof *b->deep);
    if (feed_http_open(&h, b->auth_header) < 0)
        goto out;
    for (int i = 0; i < b->o.deep_people; i++) {
        feed_deep *d = &b->deep[i];
        snprintf(d->user, sizeof d->user, "p%d", i);
        d->cursor[0] = '\0';
        for (int walked = 0; walked < b->o.deep; walked += FEED_WALK_LIMIT) {
            int limit = b->o.deep - walked < FEED_WALK_LIMIT ? b->o.deep - walked : FEED_WALK_LIMIT;
            snprintf(url, sizeof url, "%s/v1/feed?user=%s&limit=%d%s%s", b->base_url, d->user,
                     limit, d->cursor[0] ? "&cursor=" : "", d->cursor);
            long status = feed_http_do(&h, url, false, err, sizeof err);
            if (status != 200) {
                crier_cli_error("bench", "walking %s's feed: %s", d->user,
                                status < 0    ? err
                                : h.body.data ? h.body.data
                                              : "no body");
                goto out;
            }
            if (feed_next_cursor(h.body.data, d->cursor, sizeof d->cursor) < 0 || !d->cursor[0]) {
                crier_cli_error("bench",
                                "%s's feed ends before %d items (raise --notifications or lower "
                                "--deep)",
                                d->user, b->o.deep);
                goto out;
            }
        }
        /* the cursor: a version byte, the position (big-endian), a MAC */
        unsigned char raw[64];
        long len = crier_base64url_decode(d->cursor, strlen(d->cursor), raw, sizeof raw);
        if (len < 9) {
            crier_cli_error("bench", "cannot read the cursor '%s'", d->cursor);
            goto out;
        }
        uint64_t pos = 0;
        for (int k = 1; k <= 8; k++)
            pos = (pos << 8) | raw[k];
        snprintf(d->before, sizeof d->before, "%llu", (unsigned long long)pos);
    }
    rc = 0;
out:
    feed_http_close(&h);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Timing */

/* One client thread of one side of one operation. */
typedef struct {
    const feed_ctx *b;
    int op;
    bool http;
    int client;
    const int *who; /* per request: a person (p<who>), or a deep page's index */
    long n, warm;   /* who[0..warm) warm up, who[warm..warm+n) are timed */
    double *lat;    /* ms of timed request i at lat[i] */
    pthread_barrier_t *start;
    char err[512];
} feed_worker;

/* One request of w's operation for who, over HTTP or SQL. Returns 0, or -1
 * with w->err set. */
static int feed_request(feed_worker *w, feed_http *h, PGconn *conn, int who)
{
    const feed_deep *d = w->op == OP_DEEP_PAGE ? &w->b->deep[who] : NULL;
    char user[24], url[512], limit[16];
    const char *values[6];
    PGresult *res;
    bool ok = true;

    if (d)
        snprintf(user, sizeof user, "%s", d->user);
    else
        snprintf(user, sizeof user, "p%d", who);
    if (w->http) {
        switch (w->op) {
        case OP_FIRST_PAGE:
            snprintf(url, sizeof url, "%s/v1/feed?user=%s&limit=%d", w->b->base_url, user,
                     FEED_PAGE_LIMIT);
            break;
        case OP_DEEP_PAGE:
            snprintf(url, sizeof url, "%s/v1/feed?user=%s&limit=%d&cursor=%s", w->b->base_url, user,
                     FEED_PAGE_LIMIT, d->cursor);
            break;
        case OP_UNREAD_COUNT:
        case OP_HEAVY_COUNT:
            snprintf(url, sizeof url, "%s/v1/feed/counts?user=%s", w->b->base_url, user);
            break;
        default:
            snprintf(url, sizeof url, "%s/v1/feed/read-all?user=%s", w->b->base_url, user);
            break;
        }
        long status = feed_http_do(h, url, w->op == OP_MARK_ALL_READ, w->err, sizeof w->err);
        if (status != 200) {
            if (status >= 0)
                snprintf(w->err, sizeof w->err, "%.200s: HTTP %ld %.250s", url, status,
                         h->body.data ? h->body.data : "");
            return -1;
        }
        return 0;
    }
    /* SQL: the API's statements in the API's transaction */
    snprintf(limit, sizeof limit, "%d", FEED_PAGE_LIMIT + 1);
    values[0] = FEED_TENANT;
    values[1] = user;
    res = PQexec(conn, "BEGIN");
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (ok) {
        switch (w->op) {
        case OP_FIRST_PAGE:
            values[2] = limit;
            values[3] = "false";
            res = PQexecPrepared(conn, FEED_FIRST_PAGE_STMT, 4, values, NULL, NULL, 0);
            break;
        case OP_DEEP_PAGE:
            values[2] = d->before;
            values[3] = limit;
            values[4] = "false";
            res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_PAGE, 5, NULL, values, NULL, NULL, 0);
            break;
        case OP_UNREAD_COUNT:
        case OP_HEAVY_COUNT:
            res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_COUNTS, 2, NULL, values, NULL, NULL, 0);
            break;
        default:
            values[2] = "read";
            values[3] = values[4] = values[5] = NULL;
            res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_MARK_ALL, 6, NULL, values, NULL, NULL, 0);
            if (PQresultStatus(res) == PGRES_TUPLES_OK) {
                PQclear(res);
                res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_COUNTS, 2, NULL, values, NULL, NULL, 0);
            }
            break;
        }
        ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0;
        PQclear(res);
    }
    res = PQexec(conn, ok ? "COMMIT" : "ROLLBACK");
    if (ok)
        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok)
        snprintf(w->err, sizeof w->err, "%s for %s: %s", op_names[w->op], user,
                 PQerrorMessage(conn));
    return ok ? 0 : -1;
}

/* A client thread: connects, warms up, waits for the others, then times its
 * share of the requests (every clients-th one). */
static void *feed_worker_main(void *arg)
{
    feed_worker *w = arg;
    int clients = w->b->o.clients;
    feed_http h = {0};
    PGconn *conn = NULL;
    bool ok = true;

    if (w->http) {
        if (feed_http_open(&h, w->b->auth_header) < 0) {
            snprintf(w->err, sizeof w->err, "cannot set up libcurl");
            ok = false;
        }
    } else {
        conn = PQconnectdb(w->b->conninfo);
        if (PQstatus(conn) != CONNECTION_OK) {
            snprintf(w->err, sizeof w->err, "cannot connect: %s", PQerrorMessage(conn));
            ok = false;
        } else {
            PGresult *res = PQexec(conn, "SET TimeZone = 'UTC'");
            PQclear(res);
            res = PQprepare(conn, FEED_FIRST_PAGE_STMT, CRIER_HTTP_SQL_FEED_FIRST_PAGE, 4, NULL);
            if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                snprintf(w->err, sizeof w->err, "cannot prepare the first page: %s",
                         PQresultErrorMessage(res));
                ok = false;
            }
            PQclear(res);
        }
    }
    for (long i = w->client; ok && i < w->warm; i += clients)
        ok = feed_request(w, &h, conn, w->who[i]) == 0;
    pthread_barrier_wait(w->start);
    for (long i = w->client; ok && i < w->n; i += clients) {
        double t0 = crier_clock_s();
        ok = feed_request(w, &h, conn, w->who[w->warm + i]) == 0;
        w->lat[i] = (crier_clock_s() - t0) * 1000.0;
    }
    feed_http_close(&h);
    if (conn)
        PQfinish(conn);
    return NULL;
}

/* Times one side of one operation: who[0..warm) warm up, who[warm..warm+n)
 * are timed, over the bench's client threads. Stores p50 and p99 in ms.
 * Returns 0 or -1 (message printed). */
static int feed_side(const feed_ctx *b, int op, bool http, const int *who, long warm, long n,
                     double *p50, double *p99)
{
    int clients = b->o.clients, rc = 0;
    feed_worker *w = crier_xcalloc((size_t)clients, sizeof *w);
    pthread_t *threads = crier_xcalloc((size_t)clients, sizeof *threads);
    double *lat = crier_xmalloc((size_t)n * sizeof *lat);
    pthread_barrier_t start;

    pthread_barrier_init(&start, NULL, (unsigned)clients);
    for (int c = 0; c < clients; c++) {
        w[c] = (feed_worker){b, op, http, c, who, n, warm, lat, &start, ""};
        if (pthread_create(&threads[c], NULL, feed_worker_main, &w[c]) != 0)
            abort();
    }
    for (int c = 0; c < clients; c++) {
        pthread_join(threads[c], NULL);
        if (w[c].err[0] && rc == 0) {
            crier_cli_error("bench", "%s (%s): %s", op_names[op], http ? "HTTP" : "SQL", w[c].err);
            rc = -1;
        }
    }
    pthread_barrier_destroy(&start);
    if (rc == 0) {
        qsort(lat, (size_t)n, sizeof *lat, crier_bench_cmp_double);
        *p50 = crier_bench_quantile(lat, (size_t)n, 0.50);
        *p99 = crier_bench_quantile(lat, (size_t)n, 0.99);
    }
    free(lat);
    free(threads);
    free(w);
    return rc;
}

/* The people (or deep pages) one operation asks for in a run: warm-up ones
 * first, then the timed ones; the same list for both sides. */
static void feed_pick(const feed_ctx *b, int op, int run, int *who, long count)
{
    uint64_t state = 0x5eed0000ULL + (uint64_t)run * 131 + (uint64_t)op;
    for (long i = 0; i < count; i++) {
        uint64_t r = feed_random(&state);
        switch (op) {
        case OP_DEEP_PAGE:
            who[i] = (int)(i % b->o.deep_people);
            break;
        case OP_HEAVY_COUNT:
            who[i] = (int)(r % (uint64_t)b->heavy);
            break;
        default:
            who[i] = (int)(r % (uint64_t)b->o.people);
            break;
        }
    }
}

/* One run: every operation, HTTP and SQL side (which goes first alternates
 * with the run), each after a warm-up; the states are put back before and
 * after each side of mark-all-read. */
static int feed_one_run(feed_ctx *b, int run, feed_run *r)
{
    long n = b->o.requests, warm = n / 10 > 100 ? 100 : n / 10 + 1;
    int *who = crier_xmalloc((size_t)(warm + n) * sizeof *who);
    for (int op = 0; op < OP_COUNT; op++) {
        feed_pick(b, op, run, who, warm + n);
        for (int side = 0; side < 2; side++) {
            bool http = (side == 0) == (run % 2 == 0);
            if (op == OP_MARK_ALL_READ && feed_restore_states(b->conn) < 0)
                goto fail;
            if (feed_side(b, op, http, who, warm, n, http ? &r->http_p50[op] : &r->sql_p50[op],
                          http ? &r->http_p99[op] : &r->sql_p99[op]) < 0)
                goto fail;
        }
    }
    free(who);
    return feed_restore_states(b->conn);
fail:
    free(who);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* --explain */

/* Collects the notices (auto_explain's plans) of the explain connection. */
static void feed_notice(void *ud, const PGresult *res)
{
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    crier_json_buf_puts(ud, msg ? msg : PQresultErrorMessage(res));
    crier_json_buf_puts(ud, "\n\n");
}

/* Runs one of the API's statements (in a transaction rolled back: --explain
 * changes nothing) and prints the plans auto_explain sent. */
static int feed_explain_one(PGconn *conn, crier_json_buf *plans, const char *title, int op,
                            const char *user, const char *before)
{
    char limit[16];
    const char *values[6] = {FEED_TENANT, user, NULL, NULL, NULL, NULL};
    PGresult *res;
    bool ok;

    snprintf(limit, sizeof limit, "%d", FEED_PAGE_LIMIT + 1);
    if (crier_bench_exec(conn, "BEGIN") < 0)
        return -1;
    feed_body_reset(plans);
    if (op == OP_FIRST_PAGE || op == OP_DEEP_PAGE) {
        values[2] = before;
        values[3] = limit;
        values[4] = "false";
        res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_PAGE, 5, NULL, values, NULL, NULL, 0);
    } else if (op == OP_MARK_ALL_READ) {
        values[2] = "read";
        res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_MARK_ALL, 6, NULL, values, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            PQclear(res);
            res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_COUNTS, 2, NULL, values, NULL, NULL, 0);
        }
    } else {
        res = PQexecParams(conn, CRIER_HTTP_SQL_FEED_COUNTS, 2, NULL, values, NULL, NULL, 0);
    }
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        crier_cli_error("bench", "%s: %s", title, PQresultErrorMessage(res));
    PQclear(res);
    if (crier_bench_exec(conn, "ROLLBACK") < 0 || !ok)
        return -1;
    printf("=== %s ===\n\n%s", title, plans->len ? plans->data : "(no plan)\n\n");
    return 0;
}

/* --explain: the plans of the statements behind each operation, for a light
 * person, a heavy one and one with a read watermark. */
static int feed_explain(feed_ctx *b)
{
    static const char *const sets[] = {"LOAD 'auto_explain'",
                                       "SET auto_explain.log_min_duration = 0",
                                       "SET auto_explain.log_nested_statements = on",
                                       "SET auto_explain.log_analyze = on",
                                       "SET auto_explain.log_buffers = on",
                                       "SET auto_explain.log_level = notice",
                                       "SET client_min_messages = notice",
                                       NULL};
    struct {
        const char *kind, *sql;
        char user[24];
        char before[24];
        double items, memberships, states;
    } who[] = {
        {"light person",
         "SELECT 'p' || person FROM " FEED_SCHEMA ".people p WHERE tier = 2"
         " ORDER BY EXISTS (SELECT 1 FROM crier.feed_watermarks w WHERE w.tenant = '" FEED_TENANT
         "' AND w.recipient_id = 'p' || p.person), abs(n - 3), person LIMIT 1",
         "", "", 0, 0, 0},
        {"heavy person",
         "SELECT 'p' || person FROM " FEED_SCHEMA ".people p WHERE tier = 0"
         " ORDER BY EXISTS (SELECT 1 FROM crier.feed_watermarks w WHERE w.tenant = '" FEED_TENANT
         "' AND w.recipient_id = 'p' || p.person), person LIMIT 1",
         "", "", 0, 0, 0},
        {"person with a read watermark",
         "SELECT w.recipient_id FROM crier.feed_watermarks w JOIN " FEED_SCHEMA ".people p"
         " ON w.recipient_id = 'p' || p.person WHERE w.read_snapshot IS NOT NULL"
         " ORDER BY p.tier = 1 DESC, w.read_upto IS NOT NULL DESC, EXISTS (SELECT 1 FROM"
         " crier.feed_states s WHERE s.tenant = w.tenant AND s.recipient_id = w.recipient_id"
         " AND s.read = false) DESC, p.person LIMIT 1",
         "", "", 0, 0, 0},
    };
    char title[512], sql[512];
    crier_json_buf plans = {0};
    uint64_t state = 42;
    int rc = -1;

    for (size_t i = 0; i < sizeof who / sizeof who[0]; i++) {
        if (feed_query_text(b->conn, who[i].sql, who[i].user, sizeof who[i].user) < 0)
            goto out;
        if (!who[i].user[0]) {
            crier_cli_error("bench", "the dataset has no %s", who[i].kind);
            goto out;
        }
        double v[3];
        snprintf(sql, sizeof sql,
                 "SELECT (SELECT count(*) FROM crier.feed_items WHERE tenant = '" FEED_TENANT
                 "' AND recipient_id = '%s'), (SELECT count(*) FROM crier.memberships WHERE tenant"
                 " = '" FEED_TENANT "' AND recipient_id = '%s'), (SELECT count(*) FROM"
                 " crier.feed_states WHERE tenant = '" FEED_TENANT "' AND recipient_id = '%s')",
                 who[i].user, who[i].user, who[i].user);
        if (crier_bench_query_numbers(b->conn, sql, v, 3) < 0)
            goto out;
        who[i].items = v[0];
        who[i].memberships = v[1];
        who[i].states = v[2];
    }
    /* the deep page: the position D items down (what the walked cursor holds) */
    snprintf(sql, sizeof sql, "SELECT min(id) FROM crier.feed('" FEED_TENANT "', '%s', NULL, %d)",
             who[1].user, b->o.deep);
    if (feed_query_text(b->conn, sql, who[1].before, sizeof who[1].before) < 0)
        goto out;
    /* crier.feed_mark_all and crier.feed_counts are PL/pgSQL: a connection
     * caches their plans and may switch to generic ones after five calls.
     * Warm them as a long-lived API connection is (random people, heavy ones
     * among them), so that the plans shown are the ones it uses. */
    for (int i = 0; i < 20; i++) {
        char user[24];
        const char *values[2] = {FEED_TENANT, user};
        uint64_t r = feed_random(&state);
        snprintf(user, sizeof user, "p%d",
                 (int)(i % 4 == 0 ? r % (uint64_t)b->heavy : r % (uint64_t)b->o.people));
        if (crier_bench_exec(b->conn, "BEGIN") < 0)
            goto out;
        PGresult *res =
            PQexecParams(b->conn, "SELECT crier.feed_mark_all($1, $2, 'read', NULL::bigint)", 2,
                         NULL, values, NULL, NULL, 0);
        PQclear(res);
        res = PQexecParams(b->conn, CRIER_HTTP_SQL_FEED_COUNTS, 2, NULL, values, NULL, NULL, 0);
        PQclear(res);
        if (crier_bench_exec(b->conn, "ROLLBACK") < 0)
            goto out;
    }
    PQsetNoticeReceiver(b->conn, feed_notice, &plans);
    for (const char *const *s = sets; *s; s++)
        if (crier_bench_exec(b->conn, *s) < 0)
            goto out;
    for (size_t i = 0; i < sizeof who / sizeof who[0]; i++) {
        printf("##### %s %s: %.0f direct items, %.0f memberships, %.0f explicit states\n\n",
               who[i].kind, who[i].user, who[i].items, who[i].memberships, who[i].states);
        snprintf(title, sizeof title, "%s: first page (GET /v1/feed?user=%s&limit=%d)", who[i].user,
                 who[i].user, FEED_PAGE_LIMIT);
        if (feed_explain_one(b->conn, &plans, title, OP_FIRST_PAGE, who[i].user, NULL) < 0)
            goto out;
        if (who[i].before[0]) {
            snprintf(title, sizeof title, "%s: deep page (%d items down, before position %s)",
                     who[i].user, b->o.deep, who[i].before);
            if (feed_explain_one(b->conn, &plans, title, OP_DEEP_PAGE, who[i].user, who[i].before) <
                0)
                goto out;
        }
        snprintf(title, sizeof title, "%s: unread count (GET /v1/feed/counts?user=%s)", who[i].user,
                 who[i].user);
        if (feed_explain_one(b->conn, &plans, title, OP_UNREAD_COUNT, who[i].user, NULL) < 0)
            goto out;
        snprintf(title, sizeof title,
                 "%s: mark all read, then the counts (POST /v1/feed/read-all?user=%s; rolled back)",
                 who[i].user, who[i].user);
        if (feed_explain_one(b->conn, &plans, title, OP_MARK_ALL_READ, who[i].user, NULL) < 0)
            goto out;
    }
    rc = 0;
out:
    PQsetNoticeReceiver(b->conn, NULL, NULL);
    crier_bench_exec(b->conn, "RESET ALL");
    crier_json_buf_free(&plans);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Report */

/* One figure over the runs: median, min, max and spread ((max - min) / median). */
typedef struct {
    double med, lo, hi, spread_pct;
} feed_figure;

static feed_figure feed_figure_of(const double *v, int n)
{
    feed_figure f;
    crier_bench_stats(v, n, &f.med, &f.lo, &f.hi);
    f.spread_pct = f.med > 0 ? 100.0 * (f.hi - f.lo) / f.med : NAN;
    return f;
}

/* The figure of field (an array of OP_COUNT in feed_run at offset) for op. */
static feed_figure feed_op_figure(const feed_run *runs, int n, size_t offset, int op)
{
    double *v = crier_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int i = 0; i < n; i++)
        v[i] = ((const double *)((const char *)&runs[i] + offset))[op];
    feed_figure f = feed_figure_of(v, n);
    free(v);
    return f;
}

static void json_number(const char *name, const char *suffix, double v, int decimals)
{
    if (isnan(v))
        printf(", \"%s%s\": null", name, suffix);
    else
        printf(", \"%s%s\": %.*f", name, suffix, decimals, v);
}

#define FEED_TARGET_MS 10.0

static void feed_report(const feed_ctx *b, const feed_run *runs, double load_start)
{
    const feed_opts *o = &b->o;
    feed_figure hp50[OP_COUNT], hp99[OP_COUNT], sp50[OP_COUNT], sp99[OP_COUNT];
    double *loads = crier_xmalloc((size_t)o->repeat * sizeof *loads);
    char name[64];

    for (int i = 0; i < o->repeat; i++)
        loads[i] = runs[i].load;
    feed_figure load = feed_figure_of(loads, o->repeat);
    free(loads);
    for (int op = 0; op < OP_COUNT; op++) {
        hp50[op] = feed_op_figure(runs, o->repeat, offsetof(feed_run, http_p50), op);
        hp99[op] = feed_op_figure(runs, o->repeat, offsetof(feed_run, http_p99), op);
        sp50[op] = feed_op_figure(runs, o->repeat, offsetof(feed_run, sql_p50), op);
        sp99[op] = feed_op_figure(runs, o->repeat, offsetof(feed_run, sql_p99), op);
    }
    bool first_ok = hp99[OP_FIRST_PAGE].med < FEED_TARGET_MS;
    bool count_ok = hp99[OP_UNREAD_COUNT].med < FEED_TARGET_MS;

    if (o->json) {
        printf("{\"people\": %d, \"notifications\": %d, \"audience_items\": %d", o->people,
               o->notifications, o->audience_items);
        for (int op = 0; op < OP_COUNT; op++) {
            json_number(op_names[op], "_p50_ms", hp50[op].med, 3);
            json_number(op_names[op], "_p99_ms", hp99[op].med, 3);
            json_number(op_names[op], "_p99_ms_min", hp99[op].lo, 3);
            json_number(op_names[op], "_p99_ms_max", hp99[op].hi, 3);
            json_number(op_names[op], "_p99_spread_pct", hp99[op].spread_pct, 1);
            snprintf(name, sizeof name, "sql_%s", op_names[op]);
            json_number(name, "_p50_ms", sp50[op].med, 3);
            json_number(name, "_p99_ms", sp99[op].med, 3);
            json_number(op_names[op], "_p50_ratio", hp50[op].med / sp50[op].med, 2);
            json_number(op_names[op], "_p99_ratio", hp99[op].med / sp99[op].med, 2);
        }
        printf(", \"first_page_target_met\": %s, \"unread_count_target_met\": %s",
               first_ok ? "true" : "false", count_ok ? "true" : "false");
        json_number("load_avg", "", load.med, 2);
        json_number("load_avg_min", "", load.lo, 2);
        json_number("load_avg_max", "", load.hi, 2);
        json_number("load_avg_start", "", load_start, 2);
        json_number("dataset_build_s", "", b->build_s, 1);
        printf(", \"cpus\": %ld, \"requests\": %d, \"clients\": %d, \"deep_items\": %d,"
               " \"deep_people\": %d, \"runs\": %d}\n",
               sysconf(_SC_NPROCESSORS_ONLN), o->requests, o->clients, o->deep, o->deep_people,
               o->repeat);
        return;
    }
    printf("%d feed items over %d people, %d audience items; %d requests per operation and "
           "side, %d client%s, %d runs\n",
           o->notifications, o->people, o->audience_items, o->requests, o->clients,
           o->clients == 1 ? "" : "s", o->repeat);
    printf("ms (median of the runs' p50/p99)  HTTP p50  HTTP p99 (min-max, spread)     "
           "SQL p50  SQL p99  HTTP/SQL p50  p99\n");
    for (int op = 0; op < OP_COUNT; op++)
        printf("%-33s %8.2f  %8.2f (%.2f-%.2f, %3.0f%%) %8.2f %8.2f %9.2f %8.2f\n", op_names[op],
               hp50[op].med, hp99[op].med, hp99[op].lo, hp99[op].hi, hp99[op].spread_pct,
               sp50[op].med, sp99[op].med, hp50[op].med / sp50[op].med,
               hp99[op].med / sp99[op].med);
    printf("targets (p99 < %.0f ms): first_page %s, unread_count %s\n", FEED_TARGET_MS,
           first_ok ? "met" : "MISSED", count_ok ? "met" : "MISSED");
    printf("deep_page: %d items down the feeds of %d heavy people\n", o->deep, o->deep_people);
    printf("load_avg: %.2f (min %.2f, max %.2f; 1-minute load average after each run, %.2f "
           "before the first; %ld CPUs)\n",
           load.med, load.lo, load.hi, load_start, sysconf(_SC_NPROCESSORS_ONLN));
}

/* ------------------------------------------------------------------------ */
/* Entry point */

static int feed_option(void *ud, int opt, const char *arg)
{
    feed_opts *o = ud;
    switch (opt) {
    case 'p':
        return crier_cli_positive_int("bench", "people", arg, 10000000, &o->people);
    case 'N':
        return crier_cli_positive_int("bench", "notifications", arg, 100000000, &o->notifications);
    case 'a':
        return crier_cli_positive_int("bench", "audience-items", arg, 10000000, &o->audience_items);
    case 'r':
        return crier_cli_positive_int("bench", "requests", arg, 10000000, &o->requests);
    case 'n':
        return crier_cli_positive_int("bench", "repeat", arg, 1000, &o->repeat);
    case 'c':
        return crier_cli_positive_int("bench", "clients", arg, 64, &o->clients);
    case 'd':
        return crier_cli_positive_int("bench", "deep", arg, 10000000, &o->deep);
    case 'H':
        return crier_cli_positive_int("bench", "deep-people", arg, 10000, &o->deep_people);
    case 'R':
        o->rebuild = true;
        return 0;
    case 'e':
        o->explain = true;
        return 0;
    case 'k':
        o->keep = true;
        return 0;
    case 'j':
        o->json = true;
        return 0;
    }
    return -1;
}

/* `crier bench feed` (bench_feed_help says what it does): returns the
 * process exit status (0, 1 when the bench failed, 2 for a usage error). */
int crier_bench_feed(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"people", required_argument, NULL, 'p'},
                                            {"notifications", required_argument, NULL, 'N'},
                                            {"audience-items", required_argument, NULL, 'a'},
                                            {"requests", required_argument, NULL, 'r'},
                                            {"repeat", required_argument, NULL, 'n'},
                                            {"clients", required_argument, NULL, 'c'},
                                            {"deep", required_argument, NULL, 'd'},
                                            {"deep-people", required_argument, NULL, 'H'},
                                            {"rebuild", no_argument, NULL, 'R'},
                                            {"explain", no_argument, NULL, 'e'},
                                            {"keep", no_argument, NULL, 'k'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    feed_ctx b;
    crier_database db = {0};
    feed_run *runs = NULL;
    double load_start;
    bool fresh, ready = false;
    int rc = 2;

    memset(&b, 0, sizeof b);
    b.o = (feed_opts){100000, 1000000, 5000, 2000, 3, 1, 1000, 0, false, false, false, false};
    b.build_s = NAN;
    crier_cli_init(&b.cli);
    if (crier_cli_parse(&b.cli, bench_feed_help, argc, argv, options, feed_option, &b.o, &rc))
        goto out;
    if (optind < argc) {
        crier_cli_error("bench", "unexpected argument '%s' (see crier bench feed --help)",
                        argv[optind]);
        goto out;
    }
    b.heavy = b.o.people / 1000 > 0 ? b.o.people / 1000 : 1;
    if (b.o.people < 1000 || b.o.notifications < b.o.people || b.o.audience_items < 100) {
        crier_cli_error("bench", "the dataset needs --people >= 1000, --notifications >= --people "
                                 "and --audience-items >= 100");
        goto out;
    }
    if (b.o.deep_people == 0) /* not given: 20, or every heavy person if fewer */
        b.o.deep_people = b.heavy < 20 ? b.heavy : 20;
    if (b.o.deep_people > b.heavy) {
        crier_cli_error("bench",
                        "--deep-people %d: there are only %d heavy people (--people / 1000)",
                        b.o.deep_people, b.heavy);
        goto out;
    }
    rc = 1;
    /* serve's and the migration's info lines would drown the figures */
    if (!getenv("CRIER_LOG"))
        crier_log_set_level(CRIER_LOG_WARN);
    load_start = crier_bench_load();

    if (feed_open_database(&b, &db, &fresh) < 0)
        goto out;
    if (!fresh && !b.o.rebuild && feed_dataset_ready(&b, &ready) < 0)
        goto out;
    if (!ready && feed_build(&b) < 0)
        goto out;
    if (feed_restore_states(b.conn) < 0)
        goto out;
    if (b.o.explain) {
        rc = feed_explain(&b) < 0 ? 1 : 0;
        goto out;
    }
    snprintf(b.dir, sizeof b.dir, "%s/crier-bench-feed.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(b.dir)) {
        crier_cli_error("bench", "cannot create a work directory %s: %s", b.dir, strerror(errno));
        b.dir[0] = '\0';
        goto out;
    }
    if (feed_api_key(&b) < 0 || feed_write_rules(&b) < 0 || feed_serve_start(&b) < 0 ||
        feed_find_deep(&b) < 0)
        goto out;
    runs = crier_xcalloc((size_t)b.o.repeat, sizeof *runs);
    if (!b.o.json)
        fprintf(stderr,
                "bench feed: crier serve --http %s; %d requests per operation and side, %d "
                "client%s, %d runs; work directory %s\n",
                b.base_url, b.o.requests, b.o.clients, b.o.clients == 1 ? "" : "s", b.o.repeat,
                b.dir);
    for (int i = 0; i < b.o.repeat; i++) {
        feed_run *r = &runs[i];
        if (feed_one_run(&b, i, r) < 0)
            goto out;
        r->load = crier_bench_load();
        if (!b.o.json) {
            fprintf(stderr, "  run %d (%s first):", i + 1, i % 2 == 0 ? "HTTP" : "SQL");
            for (int op = 0; op < OP_COUNT; op++)
                fprintf(stderr, " %s %.2f/%.2f (SQL %.2f/%.2f);", op_names[op], r->http_p50[op],
                        r->http_p99[op], r->sql_p50[op], r->sql_p99[op]);
            fprintf(stderr, " load %.2f\n", r->load);
        }
    }
    feed_report(&b, runs, load_start);
    rc = 0;
out:
    crier_bench_stop_child(&b.serve_pid, 15);
    if (b.conn)
        PQfinish(b.conn);
    if (b.dir[0]) {
        if (rc == 0 && !b.o.keep)
            crier_bench_rm_tree(b.dir);
        else
            fprintf(stderr, "crier bench: work directory kept: %s\n", b.dir);
    }
    free(runs);
    free(b.deep);
    crier_database_close(&db);
    crier_cli_free(&b.cli);
    return rc;
}
