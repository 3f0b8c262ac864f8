/* fanout.c — event fan-out: claim, lock, plan, one-statement batch insert (see fanout.h).
 *
 * One batch is one transaction on the worker's connection:
 *   BEGIN and the claim, one round trip: SELECT … FROM crier.claim_events(n, lane) (FOR
 *           UPDATE SKIP LOCKED), each row with pg_try_advisory_xact_lock of its event's
 *           lock key (crier.event_lock_key) and whether crier.recipient_settings has rows
 *   settings (only when it has) the rules' recipients of every event, then one SELECT of
 *           their stored settings (time zone, locale, quiet hours), handed to the rules
 *   (rules run in C/Lua; keys and message ids are computed in C, keys.h)
 *   write   one statement: notifications ON CONFLICT DO NOTHING RETURNING → deliveries
 *           for the new rows only → events marked done / failed / dead
 *           (a large batch of new notifications: their ids drawn first, then the
 *           notifications and the deliveries by COPY, then this statement for the rest;
 *           the COPY rows are built while the batch is planned: fanout_rows.h)
 *   timing  (only when a delivery has a delay, throttle or digest) crier.apply_timing()
 *   COMMIT  (without a timing step, in the write's round trip: libpq's pipeline mode)
 * No network send happens inside it; a crash anywhere rolls it back and the
 * events are claimed again by any worker. */
#include "fanout.h"
#include "alloc.h"
#include "fanout_rows.h"

#include "clock.h"
#include "keys.h"
#include "log.h"
#include "pg_array.h"
#include "pg_copy.h"
#include "strbuf.h"

#include <ev.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a worker writes with conflict checks after a batch met an existing key. */
#define FANOUT_CHECKED_SECONDS 60.0

/* How many slow event types the fast lane remembers, and for how long. */
#define FANOUT_SLOW_TYPES 32
#define FANOUT_SLOW_TYPE_SECONDS 60.0

/* In the order a batch goes through them (crier_fanout_holds_events relies on it). */
typedef enum {
    FANOUT_IDLE = 0,
    FANOUT_CLAIM, /* BEGIN, the claim and the events' locks, one round trip */
    FANOUT_SETTINGS,
    FANOUT_PLAN,              /* the rules run, a slice at a time (no statement in flight) */
    FANOUT_IDS,               /* COPY path: the notifications' ids, and whether preferences apply */
    FANOUT_COPY_NOTIFICATIONS,
    FANOUT_COPY_DELIVERIES,
    FANOUT_WRITE,
    FANOUT_TIMING,
    FANOUT_COMMIT,
    FANOUT_ROLLBACK
} fanout_state;

/* Columns of SQL_CLAIM's rows. */
enum {
    CLAIM_ID,
    CLAIM_TENANT,
    CLAIM_EVENT_TYPE,
    CLAIM_ENTITY_ID,
    CLAIM_PAYLOAD,
    CLAIM_ATTEMPTS,
    CLAIM_CURSOR,
    CLAIM_LOCKED,      /* the event's advisory lock was granted to this transaction */
    CLAIM_HAS_SETTINGS, /* crier.recipient_settings has rows (the same in every row) */
    CLAIM_CREATED       /* the event's commit time, ISO 8601 UTC (deliveries.emitted_at) */
};

/* Parameters of SQL_SETTINGS: (tenant, recipient id) pairs. */
enum { SETTINGS_TENANT, SETTINGS_RECIPIENT, N_SETTINGS_PARAMS };

/* Parameters of SQL_WRITE: WRITE_X is $(WRITE_X + 1). Each is an array except
 * the two text values, WRITE_RULES_VERSION and WRITE_MAX_ATTEMPTS. */
enum {
    /* notifications, one element per new notification */
    WRITE_KEY_HASH,          /* $1  uuid[] */
    WRITE_KEY,               /* $2  text[]: the readable key */
    WRITE_EVENT_ID,          /* $3  bigint[] */
    WRITE_TENANT,            /* $4  text[] */
    WRITE_EVENT_TYPE,        /* $5  text[] */
    WRITE_ENTITY_ID,         /* $6  text[] */
    WRITE_RECIPIENT_ID,      /* $7  text[] */
    WRITE_DISCRIMINATOR,     /* $8  text[] */
    WRITE_RULES_VERSION,     /* $9  text */
    /* deliveries, one element per planned delivery */
    WRITE_DELIVERY_OF,       /* $10 bigint[]: its notification's position in $1 (1-based) */
    WRITE_CHANNEL,           /* $11 text[] */
    WRITE_TARGET,            /* $12 text[] */
    WRITE_BODY,              /* $13 text[] */
    WRITE_SECRET,            /* $14 text[] */
    /* events */
    WRITE_DONE_ID,           /* $15 bigint[]: events done */
    WRITE_FAILED_ID,         /* $16 bigint[]: events that failed … */
    WRITE_FAILED_ERROR,      /* $17 text[]: … with this error, */
    WRITE_FAILED_PERMANENT,  /* $18 bool[]: permanently (dead at once) */
    WRITE_MAX_ATTEMPTS,      /* $19 text: a failing event is dead after this many */
    /* deliveries, continued */
    WRITE_SUBJECT,           /* $20 text[] */
    WRITE_HTML,              /* $21 text[] */
    WRITE_SENDER,            /* $22 text[] */
    WRITE_RETRY,             /* $23 text[]: "{0,5,300}" or NULL */
    WRITE_HONOR_PREFERENCES, /* $24 bool[]: false when required or the rule ignores them */
    /* events with more pages of audience */
    WRITE_MORE_ID,           /* $25 bigint[] */
    WRITE_MORE_CURSOR,       /* $26 text[]: where the next page starts */
    /* audience items (rules in mode "read") */
    WRITE_AUDIENCE_EVENT_ID, /* $27 bigint[] */
    WRITE_AUDIENCE,          /* $28 text[] */
    WRITE_AUDIENCE_CONTENT,  /* $29 text[] */
    WRITE_AUDIENCE_BACKFILL, /* $30 bool[] */
    /* deliveries, continued */
    WRITE_MESSAGE_ID,        /* $31 text[]: the side-effect id, crier_key_hash_id */
    /* events whose rules ran past the fast lane's soft limit */
    WRITE_SLOW_ID,           /* $32 bigint[]: to the slow lane, untouched otherwise */
    /* deliveries, continued */
    WRITE_TIMING,            /* $33 text[]: the rule's timing JSON (delay, throttle, digest) or NULL */
    WRITE_DELIVERY_TENANT,     /* $34 text[]: its notification's tenant, */
    WRITE_DELIVERY_RECIPIENT,  /* $35 text[]: recipient */
    WRITE_DELIVERY_EVENT_TYPE, /* $36 text[]: and event type */
    WRITE_COPIED,              /* $37 text: notifications this batch wrote by COPY (for GET /metrics) */
    WRITE_DELIVERY_EMITTED,    /* $38 text[]: its event's commit time (deliveries.emitted_at) */
    WRITE_HANDOFF_LEASE,       /* $39 text: the handoff's lease in seconds, or 0 (no handoff) */
    N_WRITE_PARAMS
};
_Static_assert(N_WRITE_PARAMS <= CRIER_PG_MAX_PARAMS, "SQL_WRITE has more parameters than crier_pg_params holds");

/* Columns of SQL_WRITE's summary (SQL_WRITE_DONE's one row; in SQL_WRITE's
 * rows they follow the WRITE_HANDED_COLS columns of a handed-over delivery). */
enum { WRITTEN_NOTIFICATIONS, WRITTEN_DELIVERIES, WRITTEN_DONE, WRITTEN_DEAD };
/* The columns of a delivery handed over in SQL_WRITE's rows: as
 * crier.claim_deliveries returns them (crier_delivery_take). */
#define WRITE_HANDED_COLS 13

typedef struct {
    int64_t id;
    size_t tenant, event_type, entity_id, payload, created; /* offsets into strings */
    size_t cursor; /* offset of the page cursor, or SIZE_MAX (first page / not paged) */
    int attempts;
    bool locked;
} fanout_event;

struct crier_fanout {
    struct ev_loop *loop;
    crier_pg *pg;
    crier_rules *rules;
    crier_rules *next_rules;
    crier_fanout_options opts;
    crier_fanout_committed_fn committed;
    void *committed_ud;

    fanout_state state;
    bool kicked;       /* a pass was requested while a batch ran */
    bool stopping;
    bool last_empty;   /* the last claim found nothing */
    bool batch_full;   /* the last claim filled the batch: go again at once */
    bool released;     /* the batch's time budget released events: go again at once */
    bool write_checked; /* the batch's write is SQL_WRITE_CHECKED */
    bool redo;          /* the batch met an existing key: roll back, claim again at once */
    double checked_until; /* monotonic seconds: write SQL_WRITE_CHECKED until then */
    ev_timer retry;    /* back-off after a database error */

    fanout_event *events;
    size_t n_events, cap_events;
    crier_strbuf strings;
    crier_plan plan;
    crier_key_set seen; /* the statement path's keys, reused from batch to batch */
    uint64_t batch_deliveries;
    size_t batch_timed; /* planned deliveries with a timing (crier.apply_timing decides them) */
    size_t batch_feed;  /* planned deliveries on the feed channel (feed items: not a lean write) */
    /* The plan under way (FANOUT_PLAN): the next event to plan, how many were
     * planned, when the batch's planning began; the timer that plans the next
     * slice after the loop has served everything else that was ready. */
    size_t plan_next, planned;
    double plan_started;
    ev_timer plan_more;

    /* Parameter arrays of the statements in flight (kept until the callback);
     * cols[WRITE_RULES_VERSION], cols[WRITE_MAX_ATTEMPTS] and cols[WRITE_COPIED]
     * stay unused. */
    crier_pg_array settings_cols[N_SETTINGS_PARAMS];
    bool batch_settings; /* the rules hold stored settings for this batch (crier_rules_end_batch) */
    crier_pg_array cols[N_WRITE_PARAMS];
    crier_pg_params params;
    /* The COPY path (opts.copy_min): the batch's notification and delivery rows */
    bool copy_rows;        /* this batch writes its rows by COPY */
    crier_fanout_rows rows; /* its COPY rows, built as it is planned (fanout_rows_extend) */
    size_t rows_done;       /* plan recipients in rows so far */
    bool rows_dropped;      /* a delivery on the feed or with a timing: not by COPY */
    char copied_text[24];  /* WRITE_COPIED */
    char ids_text[24];     /* SQL_IDS' $1 */
    char begin_claim[512]; /* SQL_BEGIN_CLAIM with the limit and lane */
    char max_attempts_text[24];

    /* Fast lane: event types whose rules ran past the soft limit lately; their
     * next events go to the slow lane without running here. */
    struct {
        char type[128];
        double until; /* monotonic seconds */
    } slow_types[FANOUT_SLOW_TYPES];
    double slow_types_until; /* when the last of them expires */

    /* The handoff to the delivery worker (crier_fanout_set_handoff): the room
     * reserved for this batch's deliveries, and the write's result holding the
     * rows leased for it until the batch commits. */
    crier_fanout_handoff handoff;
    int handoff_reserved;
    PGresult *handoff_res;
    uint64_t batch_handed;
    char handoff_lease_text[16]; /* WRITE_HANDOFF_LEASE */

    crier_fanout_stats stats;
};

/* The batch's transaction opens with its claim, in one round trip (two
 * statements in one simple query; the limit and the lane are the worker's
 * own integers, written in by crier_fanout_new). crier.claim_batch
 * (sql/functions/claim_batch.sql; a function, so that the claim is not parsed
 * and planned for every batch) sets the transaction's planner settings, and
 * crier.claim_events (sql/functions/claim_events.sql) reads in the order of
 * events_pending_lane whatever the statistics say and locks the rows; then
 * each claimed event
 * tries its entity's advisory lock, in id order (a function scan returns its
 * rows before the select list runs on them), so that no two workers fan out
 * events of one entity at once: an event whose lock another worker holds is
 * left pending, and claimed again after that worker's batch. The lock key is
 * computed in SQL (crier.event_lock_key, the same value as crier_key_lock);
 * it used to be sent in a statement of its own, one more round trip per batch.
 *
 * The transaction (set for it only, once, where set_config in the
 * claim's select list ran twice per claimed row) runs
 * cached statements with their generic plans, and reaches rows by their
 * indexes, never by a sequential scan. The write is built for its generic
 * plan (no join, see SQL_WRITE_NEW), but PostgreSQL keeps planning a custom
 * one as long as that looks cheaper, which it always does for small batches:
 * at 500 events/s (batches of 1-2 events) the write was planned on every
 * execution, 0.53 ms of planning per batch against 0.49 ms of execution
 * (pg_stat_statements, track_planning). A generic plan made while the tables
 * were nearly empty (a new database, after a TRUNCATE) marked events done
 * through sequential scans and was kept while the tables grew (1.57 ms per
 * batch); without sequential scans the plan is the same whatever the
 * statistics say. */
static const char SQL_BEGIN_CLAIM[] = "BEGIN; SELECT * FROM crier.claim_batch(%d, %d::smallint)";

/* The stored settings of the batch's recipients (sql/017_recipient_settings.sql). */
static const char SQL_SETTINGS[] =
    "SELECT s.tenant, s.recipient_id, s.time_zone, s.locale, s.quiet_hours::text AS quiet_hours"
    " FROM crier.recipient_settings s"
    " WHERE (s.tenant, s.recipient_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))";

/* The batch's single write statement; its parameters are the WRITE_… values.
 * Feed deliveries (channel "feed") become feed items, not deliveries; the
 * recipient's stored preferences apply to every channel.
 *
 * Two variants (SQL_WRITE_NEW, SQL_WRITE_CHECKED) differ only in how the
 * notifications go in. Most batches create only new keys, and a plain insert
 * costs about a quarter less than ON CONFLICT DO NOTHING (which probes the
 * unique index first and confirms every row with a second WAL record;
 * docs/BENCHMARKS.md): SQL_WRITE_NEW. If a key exists after all (an entity's
 * event emitted again under another dedupe key, a replay, another worker's
 * batch), the unique index refuses it, the batch rolls back untouched and runs
 * again at once with SQL_WRITE_CHECKED, which skips existing keys; the worker
 * then keeps checking for FANOUT_CHECKED_SECONDS. Events tried before, and
 * further pages of an audience, always run checked. */
/* Marks the events of the id array IDS done by rules version VERSION (two
 * parameter references), returning each one's latency commit -> fan-out: the
 * "done" step of SQL_WRITE and of SQL_WRITE_DONE. */
#define SQL_EVENTS_DONE(IDS, VERSION) \
    "  UPDATE crier.events SET state = 'done', attempts = attempts + 1, processed_at = now()," \
    "      rules_version = " VERSION ", last_error = NULL, pages = pages + 1" \
    "  WHERE id = ANY(" IDS "::bigint[])" \
    "  RETURNING extract(epoch FROM processed_at - created_at)::float8 AS latency"

/* SQL_WRITE up to the deliveries: the notifications, their ids, the
 * preferences that apply and the delivery rows. */
#define SQL_WRITE_HEAD(ON_CONFLICT, ONLY_INSERTED)                                                 \
    /* (the comment names the statement in pg_stat_statements and pg_stat_activity) */             \
    /* The notifications' ids are drawn here, so that each delivery finds its notification's \
     * id by its position in $1, an array subscript: the statement has no join whose method \
     * depends on the batch's size, so its generic plan (it is a prepared statement) is as \
     * good for 1 row as for 5,000. */ \
    "/* crier fan-out write */ WITH src AS MATERIALIZED ("                                          \
    "  SELECT nextval('crier.notifications_id_seq') AS id, p.*"                                    \
    "  FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],"      \
    "      $7::text[], $8::text[]) WITH ORDINALITY"                                                 \
    "      AS p(key_hash, key, event_id, tenant, event_type, entity_id, recipient_id, discriminator, ord)" \
    "), ins AS ("                                                                                  \
    "  INSERT INTO crier.notifications AS n (id, key_hash, key, event_id, tenant, event_type,"    \
    "      entity_id, recipient_id, discriminator, rules_version)"                                  \
    "  SELECT s.id, s.key_hash, s.key, s.event_id, s.tenant, s.event_type, s.entity_id,"          \
    "      s.recipient_id, s.discriminator, $9 FROM src s"                                          \
    ON_CONFLICT                                                                                    \
    "  RETURNING n.id" \
    "), ids AS MATERIALIZED (SELECT array_agg(s.id ORDER BY s.ord) AS id FROM src s" \
    /* the batch's recipients who have stored preferences: one probe per distinct \
     * recipient, so that deliveries to the others skip the per-delivery probe */ \
    "), with_prefs AS MATERIALIZED (" \
    "  SELECT DISTINCT p.tenant, p.recipient_id FROM crier.preferences p" \
    "  JOIN (SELECT DISTINCT * FROM unnest($4::text[], $7::text[])) AS r(tenant, recipient_id)" \
    "    ON p.tenant = r.tenant AND p.recipient_id = r.recipient_id" \
    "), planned AS (" \
    "  SELECT q.*, (q.pref).enabled AS pref_enabled, (q.pref).event_type AS pref_type," \
    "      (q.pref).channel AS pref_channel" \
    "  FROM (SELECT (SELECT id FROM ids)[d.notification] AS notification_id, d.tenant, d.recipient_id, d.event_type," \
    "      d.channel, d.target, d.body, d.secret, d.subject, d.html, d.sender, d.retry, d.message_id, d.timing," \
    "      d.emitted," \
    /* the preference that applies (the most specific), looked up only for \
     * recipients who have any: a per-row lookup cost 1 µs even when it found nothing */ \
    "      CASE WHEN d.honor AND (d.tenant, d.recipient_id) IN (SELECT * FROM with_prefs) THEN (" \
    "          SELECT p FROM crier.preferences p" \
    "          WHERE p.tenant = d.tenant AND p.recipient_id = d.recipient_id" \
    "            AND p.event_type IN (d.event_type, '*') AND p.channel IN (d.channel, '*')" \
    "          ORDER BY (p.event_type <> '*') DESC, (p.channel <> '*') DESC LIMIT 1) END AS pref" \
    "    FROM unnest($10::bigint[], $11::text[], $12::text[], $13::text[], $14::text[], $20::text[]," \
    "        $21::text[], $22::text[], $23::text[], $24::bool[], $31::text[], $33::text[], $34::text[]," \
    "        $35::text[], $36::text[], $38::text[])" \
    "        AS d(notification, channel, target, body, secret, subject, html, sender, retry, honor, message_id, timing," \
    "            tenant, recipient_id, event_type, emitted)" \
    ONLY_INSERTED \
    "    OFFSET 0) q" \
    /* the handoff (fanout_reserve_handoff): only while every endpoint is active, \
     * as crier.claim_deliveries would send them */ \
    "), hand AS MATERIALIZED (" \
    "  SELECT CASE WHEN $39::int > 0 THEN NOT EXISTS (SELECT FROM crier.endpoints e WHERE e.state <> 'active')" \
    "      ELSE false END AS ok" \
    "), dlv AS (" \
    "  INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body, secret," \
    "      subject, html, sender, retry_schedule, timing, emitted_at, state, last_error, attempts, lease_until)" \
    "  SELECT p.notification_id, p.tenant, p.channel, p.message_id," \
    "      p.target, p.body, p.secret, p.subject, p.html, p.sender, p.retry::int[], p.timing::jsonb," \
    "      p.emitted::timestamptz," \
    "      CASE WHEN p.pref_enabled = false THEN 'suppressed' WHEN p.timing IS NOT NULL THEN 'timing'" \
    "          ELSE 'pending' END," \
    "      CASE WHEN p.pref_enabled = false THEN 'suppressed by the recipient''s preference (event type '" \
    "          || p.pref_type || ', channel ' || p.pref_channel || ')' END," \
    /* handed over: leased as a claim leaves a row (attempt 1, lease_until) */ \
    "      CASE WHEN h.ok AND p.pref_enabled IS NOT false AND p.timing IS NULL THEN 1 ELSE 0 END," \
    "      CASE WHEN h.ok AND p.pref_enabled IS NOT false AND p.timing IS NULL" \
    "          THEN now() + make_interval(secs => $39::int) END" \
    "  FROM planned p, hand h WHERE p.channel <> 'feed'" \
    "  RETURNING lease_until IS NOT NULL AS handed, id, attempts, channel, message_id, target," \
    "      CASE WHEN lease_until IS NOT NULL THEN body END AS body, secret, subject," \
    "      CASE WHEN lease_until IS NOT NULL THEN html END AS html, sender, retry_schedule, budget_start" \
    ")"

/* The rows SQL_WRITE returns: the deliveries handed over (WRITE_HANDED_COLS
 * columns, as crier.claim_deliveries'), each followed by the summary k (the
 * WRITTEN_… columns); without any, one row whose delivery columns are NULL. */
#define SQL_WRITE_TAIL \
    " SELECT h.id, h.attempts, h.channel, h.message_id, h.target, h.body, h.secret, h.subject, h.html," \
    "        h.sender, h.retry_schedule, h.budget_start, false AS probe, k.*" \
    " FROM k LEFT JOIN (SELECT * FROM dlv WHERE dlv.handed) h ON true"

/* The rest of SQL_WRITE after the deliveries: feed items, audience items, the
 * events' marks (done, more pages, failed, slow lane) and the counts. */
#define SQL_WRITE_REST \
    ", feed AS (" \
    "  INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)" \
    "  SELECT p.tenant, p.recipient_id, p.notification_id, p.event_type, p.body::jsonb" \
    "  FROM planned p WHERE p.channel = 'feed' AND p.pref_enabled IS NOT false" \
    "  RETURNING 1" \
    "), aud AS (" \
    "  INSERT INTO crier.audience_items (tenant, audience, event_id, event_type, content, backfill)" \
    "  SELECT e.tenant, a.audience, e.id, e.event_type, a.content::jsonb, a.backfill" \
    "  FROM unnest($27::bigint[], $28::text[], $29::text[], $30::bool[]) AS a(event_id, audience, content, backfill)" \
    "  JOIN crier.events e ON e.id = a.event_id" \
    "  ON CONFLICT (event_id, audience) DO NOTHING" \
    "  RETURNING 1" \
    "), done AS (" SQL_EVENTS_DONE("$15", "$9") \
    "), more AS (" \
    "  UPDATE crier.events AS e SET cursor = m.cursor, pages = e.pages + 1, rules_version = $9," \
    "      last_error = NULL" \
    "  FROM unnest($25::bigint[], $26::text[]) AS m(id, cursor)" \
    "  WHERE e.id = m.id" \
    "  RETURNING 1" \
    "), failed AS (" \
    "  UPDATE crier.events AS e SET attempts = e.attempts + 1, last_error = f.error," \
    "      rules_version = $9," \
    "      state = CASE WHEN f.permanent OR e.attempts + 1 >= $19::int THEN 'dead' ELSE 'pending' END," \
    "      processed_at = CASE WHEN f.permanent OR e.attempts + 1 >= $19::int THEN now() END," \
    "      available_at = now() + make_interval(secs => least(300, power(2, e.attempts + 1))" \
    "          * (0.5 + random() / 2))" \
    "  FROM unnest($16::bigint[], $17::text[], $18::bool[]) AS f(id, error, permanent)" \
    "  WHERE e.id = f.id" \
    "  RETURNING e.state" \
    "), slowed AS (" \
    "  UPDATE crier.events SET lane = 1 WHERE id = ANY($32::bigint[])" \
    "  RETURNING 1" \
    ")," \
    /* GET /metrics' counters, in the batch's transaction (sql/functions/metrics_fanout.sql) */ \
    " k AS MATERIALIZED (" \
    "  SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM dlv), (SELECT count(*) FROM done)," \
    "        (SELECT count(*) FROM failed WHERE state = 'dead')," \
    "        crier.metrics_fanout((SELECT count(*) FROM ins) + $37::bigint, (SELECT count(*) FROM failed WHERE state = 'dead')," \
    "            (SELECT array_agg(latency) FROM done)," \
    "            (SELECT count(*) FROM planned WHERE channel = 'feed' AND pref_enabled = false))" \
    ")" SQL_WRITE_TAIL

/* The rest of a lean batch's write: one whose deliveries are none on the feed
 * and none with a timing, and which has no audience item, no further page, no
 * failed event and none for the slow lane (fanout_write_is_lean) — a batch of
 * one event, mostly, at a low rate. SQL_WRITE_REST's six CTEs modify tables
 * whether or not they have rows, so each one's ModifyTable started up (its
 * relation and indexes opened) and the two INSERTs fired their tables'
 * statement-level triggers (feed_items_notify, audience_items_notify: PL/pgSQL
 * with transition tables) on every batch: ~0.13 ms of a 1.2 ms one-event write
 * under auto_explain (docs/BENCHMARKS.md, bench deliver, nineteenth session).
 * The unused CTE is not planned or run; it only gives the parameters
 * SQL_WRITE_REST reads their types, so that both variants take the same
 * parameters.
 *
 * A lean batch commits without waiting for the WAL flush, as a COPY batch does
 * and for the same reasons (SQL_IDS): it holds nothing that readers or timers
 * act on directly (no feed item, audience item or timing), and a server crash
 * can only take it away whole, its events then fanned out again with the same
 * keys and message ids. At 500 events/s the flush was ~8 % of a fan-out
 * connection's CPU (fdatasync, perf) and a wait in every batch before its
 * deliveries could be claimed. */
#define SQL_WRITE_LEAN_REST \
    ", done AS (" SQL_EVENTS_DONE("$15", "$9") "), unused AS (" \
    "  SELECT $16::bigint[], $17::text[], $18::bool[], $19::int, $25::bigint[], $26::text[]," \
    "      $27::bigint[], $28::text[], $29::text[], $30::bool[], $32::bigint[]" \
    "), k AS MATERIALIZED (" \
    "  SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM dlv), (SELECT count(*) FROM done), 0," \
    "        crier.metrics_fanout((SELECT count(*) FROM ins) + $37::bigint, 0," \
    "            (SELECT array_agg(latency) FROM done), 0)," \
    "        set_config('synchronous_commit', 'off', true)" \
    ")" SQL_WRITE_TAIL

#define SQL_WRITE(ON_CONFLICT, ONLY_INSERTED) SQL_WRITE_HEAD(ON_CONFLICT, ONLY_INSERTED) SQL_WRITE_REST
#define SQL_WRITE_LEAN(ON_CONFLICT, ONLY_INSERTED) SQL_WRITE_HEAD(ON_CONFLICT, ONLY_INSERTED) SQL_WRITE_LEAN_REST

/* The notifications go in plainly; a key that exists already fails the statement. */
static const char SQL_WRITE_NEW[] = SQL_WRITE("", "");
/* Existing keys are skipped, and so are their deliveries. */
#define SQL_WRITE_ON_CONFLICT "  ON CONFLICT (key_hash) DO NOTHING"
#define SQL_WRITE_ONLY_INSERTED "    WHERE (SELECT id FROM ids)[d.notification] IN (SELECT id FROM ins)"
static const char SQL_WRITE_CHECKED[] = SQL_WRITE(SQL_WRITE_ON_CONFLICT, SQL_WRITE_ONLY_INSERTED);
/* The same two for a lean batch (SQL_WRITE_LEAN_REST). */
static const char SQL_WRITE_NEW_LEAN[] = SQL_WRITE_LEAN("", "");
static const char SQL_WRITE_CHECKED_LEAN[] = SQL_WRITE_LEAN(SQL_WRITE_ON_CONFLICT, SQL_WRITE_ONLY_INSERTED);

/* The write of a batch that leaves only events done: no notification rows in
 * the statement (none planned, or all gone in by COPY before it), no failure,
 * no audience item, page or slow-lane move. SQL_WRITE's executor start-up (ten
 * CTEs, 37 parameters) made most of a small batch's cost: at 3,100 emits/s of
 * events to nobody, 1.33 ms per batch of 15 events, 90 us per event
 * (pg_stat_statements beside pgbench; docs/BENCHMARKS.md, thirteenth
 * session). The same one row as SQL_WRITE. Such a batch commits without
 * waiting for the WAL flush (a COPY batch's has been so since SQL_IDS): a
 * server crash can lose its done marks only, and the events are fanned out
 * again with the same keys (to nobody again, or, after a rules change, as a
 * retry would). */
static const char SQL_WRITE_DONE[] =
    "/* crier fan-out write, events done only */ WITH done AS (" SQL_EVENTS_DONE("$1", "$2") ")"
    " SELECT 0, 0, (SELECT count(*) FROM done), 0,"
    "        crier.metrics_fanout($3::bigint, 0, (SELECT array_agg(latency) FROM done), 0),"
    "        set_config('synchronous_commit', 'off', true)";

/* After the write, when the batch planned deliveries with a timing: holds,
 * throttles, digests (sql/functions/apply_timing.sql). */
static const char SQL_TIMING[] = "SELECT crier.apply_timing()";

/* The COPY path. A batch that plans at least opts.copy_min new notifications
 * (not SQL_WRITE_CHECKED, none on the feed channel, none with a timing)
 * writes its notification and delivery rows with COPY, which PostgreSQL
 * inserts many rows at a time (one WAL record per page of a table), where
 * INSERT … SELECT inserts them one by one and evaluates the CTEs above for
 * each: 2,500 notifications + 2,500 deliveries took 61-88 ms in SQL_WRITE
 * and 30 ms by COPY (docs/BENCHMARKS.md). First SQL_IDS draws the
 * notifications' ids from their sequence and says whether a recipient of the
 * batch has stored preferences (then the batch takes SQL_WRITE after all,
 * which applies them; the ids drawn are left unused); then the two COPYs;
 * then the write for the events and the metrics (SQL_WRITE_DONE, or
 * SQL_WRITE_NEW without notifications or deliveries when events failed or
 * moved lanes). A key that exists already fails the COPY as it fails
 * SQL_WRITE_NEW, and the batch runs again checked.
 *
 * SQL_IDS also sets synchronous_commit for the rest of the transaction: off
 * when the batch has no audience items ($4; else it stays as configured), so
 * that its COMMIT does not wait for the WAL flush (4-5 % of a fan-out
 * connection's time, and the flush holds WALWriteLock against the other
 * connection's COPY). What a server
 * crash can lose is then the last ~0.6 s of such batches (3 x
 * wal_writer_delay), whole, with their events' done marks: the events are
 * pending again and fanned out again with the same keys and message ids. A
 * delivery sent from such a batch before any durable commit flushed it (its
 * claim does not wait for the flush either: delivery.c) is sent again after
 * the crash under the same webhook-id / Message-ID, as at-least-once allows
 * and as a lost claim already was; once a delivery's result is committed
 * (durably), every batch before it is durable too. Feed items, audience items
 * and timings (which readers and timers act on directly) never take this
 * path. A reader of notifications or pending deliveries may see such rows
 * vanish after a crash and come back with new ids. */
static const char SQL_IDS[] =
    "SELECT nextval('crier.notifications_id_seq'),"
    " (SELECT EXISTS (SELECT FROM crier.preferences p"
    "   WHERE (p.tenant, p.recipient_id) IN (SELECT * FROM unnest($2::text[], $3::text[])))),"
    " (SELECT set_config('synchronous_commit', coalesce($4, current_setting('synchronous_commit')), true))"
    " FROM generate_series(1, $1::int)";
static const char SQL_COPY_NOTIFICATIONS[] =
    "COPY crier.notifications (id, key_hash, key, event_id, tenant, event_type, entity_id, recipient_id,"
    " discriminator, rules_version) FROM STDIN";
static const char SQL_COPY_DELIVERIES[] =
    "COPY crier.deliveries (notification_id, tenant, channel, message_id, target, body, secret, subject,"
    " html, sender, retry_schedule, emitted_at) FROM STDIN";

static void fanout_step(crier_fanout *f);

static void fanout_send(crier_fanout *f, fanout_state next, const char *sql, const crier_pg_params *params);

static void fanout_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_fanout *f = w->data;
    (void)loop;
    (void)revents;
    if (!crier_pg_ok(f->pg) && crier_pg_reconnect(f->pg) < 0) {
        ev_timer_set(&f->retry, crier_pg_retry_after(f->pg, 2.0), 0.);
        ev_timer_start(f->loop, &f->retry);
        return;
    }
    crier_fanout_kick(f);
}

/* Abandons the batch after a database error: roll back if the connection still
 * works, and retry after a pause. */
/* Gives the batch's handoff back to the delivery worker: after its commit
 * with the rows it leased (committed), else without them. */
static void fanout_handoff_end(crier_fanout *f, bool committed)
{
    if (f->handoff_reserved > 0) {
        PGresult *res = committed ? f->handoff_res : NULL;
        if (!committed)
            PQclear(f->handoff_res);
        f->handoff.hand(f->handoff.ud, res, f->handoff_reserved);
    }
    f->handoff_reserved = 0;
    f->handoff_res = NULL;
    f->batch_handed = 0;
}

static void fanout_abort(crier_fanout *f, const char *why)
{
    crier_error("fanout", "batch abandoned: %s", why);
    fanout_handoff_end(f, false);
    f->n_events = 0;
    f->redo = false; /* the pause below applies, not an immediate claim */
    if (crier_pg_ok(f->pg) && f->state != FANOUT_ROLLBACK && f->state != FANOUT_IDLE) {
        fanout_send(f, FANOUT_ROLLBACK, "ROLLBACK", NULL);
        return;
    }
    f->state = FANOUT_IDLE;
    if (!ev_is_active(&f->retry)) {
        ev_timer_set(&f->retry, 1.0, 0.);
        ev_timer_start(f->loop, &f->retry);
    }
}

static void fanout_result(void *ud, PGresult *res, const char *err);

/* After a statement of the batch was handed to the connection (sent < 0: it
 * could not be): abandons the batch if it was not sent. */
static void fanout_sent(crier_fanout *f, int sent)
{
    if (sent < 0) {
        f->state = FANOUT_IDLE;
        fanout_abort(f, "cannot send a query");
    }
}

/* Sends the batch's next statement (as the prepared statement name unless NULL). */
static void fanout_send_as(crier_fanout *f, fanout_state next, const char *name, const char *sql,
                           const crier_pg_params *params)
{
    f->state = next;
    fanout_sent(f, name ? crier_pg_query_prepared(f->pg, name, sql, params, fanout_result, f)
                        : crier_pg_query(f->pg, sql, params, fanout_result, f));
}

static void fanout_send(crier_fanout *f, fanout_state next, const char *sql, const crier_pg_params *params)
{
    fanout_send_as(f, next, NULL, sql, params);
}

/* The batch's write, prepared under name, and when nothing follows it in the
 * batch (no timing to apply) its COMMIT in the same round trip (libpq's
 * pipeline mode, crier_pg_query_prepared_commit): at 500 events/s each batch
 * is one or two events, and a round trip is then a good part of the time
 * between an event's commit and its send. */
static void fanout_send_write_as(crier_fanout *f, const char *name, const char *sql)
{
    if (f->batch_timed > 0) {
        fanout_send_as(f, FANOUT_WRITE, name, sql, &f->params);
        return;
    }
    f->state = FANOUT_WRITE;
    fanout_sent(f, crier_pg_query_prepared_commit(f->pg, name, sql, &f->params, fanout_result, f));
}

static fanout_event *fanout_event_add(crier_fanout *f)
{
    if (f->n_events == f->cap_events) {
        size_t cap = f->cap_events ? f->cap_events * 2 : 64;
        fanout_event *p = crier_xrealloc(f->events, cap * sizeof *p);
        f->events = p;
        f->cap_events = cap;
    }
    return &f->events[f->n_events++];
}

/* Copies column col of claimed row i into the batch's strings; returns its offset. */
static size_t claimed_string(crier_fanout *f, PGresult *res, int i, int col)
{
    return crier_strbuf_add(&f->strings, PQgetvalue(res, i, col), (size_t)PQgetlength(res, i, col));
}

static void fanout_load_settings(crier_fanout *f);
static void fanout_plan_begin(crier_fanout *f);

static void fanout_on_claim(crier_fanout *f, PGresult *res)
{
    int n = PQntuples(res);

    f->n_events = 0;
    crier_strbuf_reset(&f->strings);
    f->last_empty = n == 0;
    f->batch_full = n >= f->opts.batch_size;
    if (n == 0) {
        fanout_send(f, FANOUT_COMMIT, "COMMIT", NULL);
        return;
    }
    bool settings = PQgetvalue(res, 0, CLAIM_HAS_SETTINGS)[0] == 't';
    for (int i = 0; i < n; i++) {
        fanout_event *e = fanout_event_add(f);
        e->id = strtoll(PQgetvalue(res, i, CLAIM_ID), NULL, 10);
        e->tenant = claimed_string(f, res, i, CLAIM_TENANT);
        e->event_type = claimed_string(f, res, i, CLAIM_EVENT_TYPE);
        e->entity_id = claimed_string(f, res, i, CLAIM_ENTITY_ID);
        e->payload = claimed_string(f, res, i, CLAIM_PAYLOAD);
        e->created = claimed_string(f, res, i, CLAIM_CREATED);
        e->attempts = atoi(PQgetvalue(res, i, CLAIM_ATTEMPTS));
        e->cursor = PQgetisnull(res, i, CLAIM_CURSOR) ? SIZE_MAX : claimed_string(f, res, i, CLAIM_CURSOR);
        e->locked = PQgetvalue(res, i, CLAIM_LOCKED)[0] == 't';
        f->stats.events_skipped_locked += !e->locked;
    }
    if (f->batch_settings) { /* (a batch that did not get to its plan) */
        crier_rules_end_batch(f->rules);
        f->batch_settings = false;
    }
    if (settings) {
        fanout_load_settings(f);
        return;
    }
    fanout_plan_begin(f);
}

/* True when the fast lane saw an event of type run slow lately (now: the
 * monotonic clock). Costs nothing while no type is marked. */
static bool fanout_type_is_slow(const crier_fanout *f, const char *type, double now)
{
    if (f->slow_types_until <= now)
        return false;
    for (size_t i = 0; i < FANOUT_SLOW_TYPES; i++)
        if (f->slow_types[i].until > now && !strcmp(f->slow_types[i].type, type))
            return true;
    return false;
}

/* Remembers type as slow for FANOUT_SLOW_TYPE_SECONDS (replacing the entry
 * that expires first when all are taken). Longer names are not remembered. */
static void fanout_type_mark_slow(crier_fanout *f, const char *type)
{
    size_t oldest = 0;
    if (strlen(type) >= sizeof f->slow_types[0].type)
        return;
    for (size_t i = 1; i < FANOUT_SLOW_TYPES; i++)
        if (f->slow_types[i].until < f->slow_types[oldest].until)
            oldest = i;
    snprintf(f->slow_types[oldest].type, sizeof f->slow_types[oldest].type, "%s", type);
    f->slow_types[oldest].until = crier_clock_s() + FANOUT_SLOW_TYPE_SECONDS;
    f->slow_types_until = f->slow_types[oldest].until;
}

/* The rules' view of the batch's event i. */
static crier_rule_event fanout_rule_event(crier_fanout *f, size_t i)
{
    const fanout_event *e = &f->events[i];
    crier_rule_event ev = {
        .id = e->id,
        .tenant = crier_strbuf_at(&f->strings, e->tenant),
        .event_type = crier_strbuf_at(&f->strings, e->event_type),
        .entity_id = crier_strbuf_at(&f->strings, e->entity_id),
        .payload_json = crier_strbuf_at(&f->strings, e->payload),
        .cursor = e->cursor == SIZE_MAX ? NULL : crier_strbuf_at(&f->strings, e->cursor),
        .slot = i,
        .slow_after = f->opts.lane == CRIER_FANOUT_LANE_FAST ? f->opts.slow_after : 0,
    };
    return ev;
}

/* Whether the batch's notifications may meet existing keys, so that its write
 * must skip them (SQL_WRITE_CHECKED) rather than insert them plainly: an event
 * tried before (a crash, a failed attempt, a replay) or a further page of an
 * audience, or a recent batch of this worker met one. */
static bool fanout_needs_checked_write(const crier_fanout *f)
{
    if (crier_clock_s() < f->checked_until)
        return true;
    for (size_t i = 0; i < f->n_events; i++)
        if (f->events[i].attempts > 0 || f->events[i].cursor != SIZE_MAX)
            return true;
    return false;
}

static void fanout_add_rows(crier_fanout *f);
static void fanout_rows_extend(crier_fanout *f);
static void fanout_send_write(crier_fanout *f);
static bool fanout_may_copy(crier_fanout *f);
static void fanout_send_ids(crier_fanout *f);

/* Planning a batch: the rules run for each claimed event, in slices of at
 * most FANOUT_PLAN_SLICE seconds. The fast lane's connections share one
 * thread (crier serve's main loop); a batch of 500 events takes 10-15 ms of
 * rules, and a connection whose statement finished meanwhile waited for all
 * of it, its backend idle: with two connections the server's CPUs stood idle
 * a tenth of the time in crier bench pipeline. Between slices the loop serves
 * whatever else is ready (the other connection's next statement, deliveries,
 * the API), then the plan goes on (plan_more, a timer of 0 s: served in the
 * loop's next pass, after the I/O that pass found). A batch planned in less
 * than a slice runs in one go, as before. Each fan-out has its own rules
 * (fanout_take_rules), which change only between batches, so the slices of
 * one batch all plan with one generation. */
#define FANOUT_PLAN_SLICE 0.001

static void fanout_plan_slice(crier_fanout *f);

static void fanout_plan_begin(crier_fanout *f)
{
    crier_pg_array *c = f->cols;
    static const uint32_t types[N_WRITE_PARAMS] = {
        [WRITE_KEY_HASH] = CRIER_PG_UUID,
        [WRITE_KEY] = CRIER_PG_TEXT,
        [WRITE_EVENT_ID] = CRIER_PG_INT8,
        [WRITE_TENANT] = CRIER_PG_TEXT,
        [WRITE_EVENT_TYPE] = CRIER_PG_TEXT,
        [WRITE_ENTITY_ID] = CRIER_PG_TEXT,
        [WRITE_RECIPIENT_ID] = CRIER_PG_TEXT,
        [WRITE_DISCRIMINATOR] = CRIER_PG_TEXT,
        [WRITE_RULES_VERSION] = 0, /* text */
        [WRITE_DELIVERY_OF] = CRIER_PG_INT8,
        [WRITE_CHANNEL] = CRIER_PG_TEXT,
        [WRITE_TARGET] = CRIER_PG_TEXT,
        [WRITE_BODY] = CRIER_PG_TEXT,
        [WRITE_SECRET] = CRIER_PG_TEXT,
        [WRITE_DONE_ID] = CRIER_PG_INT8,
        [WRITE_FAILED_ID] = CRIER_PG_INT8,
        [WRITE_FAILED_ERROR] = CRIER_PG_TEXT,
        [WRITE_FAILED_PERMANENT] = CRIER_PG_BOOL,
        [WRITE_MAX_ATTEMPTS] = 0, /* text */
        [WRITE_SUBJECT] = CRIER_PG_TEXT,
        [WRITE_HTML] = CRIER_PG_TEXT,
        [WRITE_SENDER] = CRIER_PG_TEXT,
        [WRITE_RETRY] = CRIER_PG_TEXT,
        [WRITE_HONOR_PREFERENCES] = CRIER_PG_BOOL,
        [WRITE_MORE_ID] = CRIER_PG_INT8,
        [WRITE_MORE_CURSOR] = CRIER_PG_TEXT,
        [WRITE_AUDIENCE_EVENT_ID] = CRIER_PG_INT8,
        [WRITE_AUDIENCE] = CRIER_PG_TEXT,
        [WRITE_AUDIENCE_CONTENT] = CRIER_PG_TEXT,
        [WRITE_AUDIENCE_BACKFILL] = CRIER_PG_BOOL,
        [WRITE_MESSAGE_ID] = CRIER_PG_TEXT,
        [WRITE_SLOW_ID] = CRIER_PG_INT8,
        [WRITE_TIMING] = CRIER_PG_TEXT,
        [WRITE_DELIVERY_TENANT] = CRIER_PG_TEXT,
        [WRITE_DELIVERY_RECIPIENT] = CRIER_PG_TEXT,
        [WRITE_DELIVERY_EVENT_TYPE] = CRIER_PG_TEXT,
        [WRITE_DELIVERY_EMITTED] = CRIER_PG_TEXT,
    };
    crier_plan_reset(&f->plan);
    for (int i = 0; i < N_WRITE_PARAMS; i++)
        if (types[i])
            crier_pg_array_begin(&c[i], types[i]);

    f->released = false;
    f->batch_timed = 0;
    f->batch_feed = 0;
    f->write_checked = fanout_needs_checked_write(f);
    crier_fanout_rows_reset(&f->rows);
    f->rows_done = 0;
    f->rows_dropped = false;
    f->plan_next = 0;
    f->planned = 0;
    f->plan_started = crier_clock_s();
    f->state = FANOUT_PLAN;
    fanout_plan_slice(f);
}

static void fanout_plan_finish(crier_fanout *f);

static void fanout_plan_more_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    fanout_plan_slice(w->data);
}

/* Plans events from plan_next on until the slice's time is up (then the
 * rest in the loop's next pass) or the batch is planned. */
static void fanout_plan_slice(crier_fanout *f)
{
    char err[4096];
    crier_pg_array *c = f->cols;
    double slice_end = crier_clock_s() + FANOUT_PLAN_SLICE;
    size_t in_slice = 0; /* events planned in this slice: at least one each */

    while (f->plan_next < f->n_events) {
        size_t i = f->plan_next++;
        fanout_event *e = &f->events[i];
        if (!e->locked)
            continue;
        double now = crier_clock_s();
        if (in_slice > 0 && now > slice_end) {
            f->plan_next = i; /* this event opens the next slice */
            fanout_rows_extend(f);
            ev_timer_set(&f->plan_more, 0., 0.);
            ev_timer_start(f->loop, &f->plan_more);
            return;
        }
        if (f->planned > 0 && now - f->plan_started > f->opts.batch_budget) {
            /* the batch's time is up: the rest stay pending, untouched, for the next one */
            f->released = true;
            f->stats.events_released++;
            continue;
        }
        if (f->opts.lane == CRIER_FANOUT_LANE_FAST &&
            fanout_type_is_slow(f, crier_strbuf_at(&f->strings, e->event_type), now)) {
            crier_pg_array_add_int64(&c[WRITE_SLOW_ID], e->id);
            f->stats.events_slowed++;
            continue;
        }
        f->planned++;
        in_slice++;
        crier_rule_event ev = fanout_rule_event(f, i);
        crier_plan_status st = crier_rules_plan(f->rules, &ev, &f->plan, err, sizeof err);
        bool over_limit = st == CRIER_PLAN_RULE_ERROR && f->plan.limit_exceeded;
        if (st == CRIER_PLAN_SLOW || (over_limit && f->opts.lane == CRIER_FANOUT_LANE_FAST)) {
            /* a rule that runs long, queries, or runs into its limits does so in the slow lane */
            crier_info("fanout", "event %lld (%s %s): its rule %s: it goes to the slow lane, with the %s events "
                                 "of the next %.0fs",
                       (long long)e->id, ev.event_type, ev.entity_id,
                       f->plan.query_deferred  ? "queries the database (crier.query)"
                       : st == CRIER_PLAN_SLOW ? "ran past the fast lane's soft limit"
                                               : "exceeded a limit",
                       ev.event_type, FANOUT_SLOW_TYPE_SECONDS);
            fanout_type_mark_slow(f, ev.event_type);
            crier_pg_array_add_int64(&c[WRITE_SLOW_ID], e->id);
            f->stats.events_slowed++;
            continue;
        }
        if (st == CRIER_PLAN_OK && f->plan.next_cursor) {
            /* one page of a large audience: the event stays pending, and the
             * next batch continues from the cursor committed with this page */
            crier_pg_array_add_int64(&c[WRITE_MORE_ID], e->id);
            crier_pg_array_add_str(&c[WRITE_MORE_CURSOR], f->plan.next_cursor);
            f->stats.pages++;
            continue;
        }
        if (st == CRIER_PLAN_OK) {
            crier_pg_array_add_int64(&c[WRITE_DONE_ID], e->id);
            continue;
        }
        crier_warn("fanout", "event %lld (%s %s): %s", (long long)e->id, ev.event_type, ev.entity_id, err);
        crier_pg_array_add_int64(&c[WRITE_FAILED_ID], e->id);
        crier_pg_array_add_str(&c[WRITE_FAILED_ERROR], err);
        crier_pg_array_add_bool(&c[WRITE_FAILED_PERMANENT], st != CRIER_PLAN_RULE_ERROR);
    }
    fanout_plan_finish(f);
}

/* The batch is planned: its rows go to the server. */
static void fanout_plan_finish(crier_fanout *f)
{
    if (f->batch_settings) {
        crier_rules_end_batch(f->rules);
        f->batch_settings = false;
    }
    f->write_checked = fanout_needs_checked_write(f);
    f->copy_rows = false;
    if (fanout_may_copy(f)) {
        fanout_send_ids(f);
        return;
    }
    fanout_add_rows(f);
    fanout_send_write(f);
}

/* Whether the batch's rows may go in by COPY (see SQL_IDS); if so, they are
 * built (fanout_rows_extend). */
static bool fanout_may_copy(crier_fanout *f)
{
    fanout_rows_extend(f);
    return !f->write_checked && !f->rows_dropped && f->opts.copy_min > 0 &&
           f->plan.n_recipients >= (size_t)f->opts.copy_min && f->rows_done == f->plan.n_recipients;
}

/* The parts of a planned recipient's notification key (keys.h). */
static crier_key_parts fanout_key_parts(const crier_fanout *f, const crier_plan_recipient *pr)
{
    const fanout_event *e = &f->events[pr->slot];
    return (crier_key_parts){
        .tenant = crier_strbuf_at(&f->strings, e->tenant),
        .event_type = crier_strbuf_at(&f->strings, e->event_type),
        .entity_id = crier_strbuf_at(&f->strings, e->entity_id),
        .recipient_id = pr->recipient,
        .discriminator = pr->discriminator,
    };
}

/* The COPY rows of the recipients planned since the last call, once the
 * batch may go by COPY: at least copy_min notifications planned so far, not
 * checked, none on the feed channel and none with a timing (a batch that has
 * one takes SQL_WRITE: its rows are dropped). Called after each slice of the
 * plan, so that the rows are ready when the ids come (fanout_rows.h). */
static void fanout_rows_extend(crier_fanout *f)
{
    if (f->rows_dropped || f->write_checked || f->opts.copy_min <= 0 ||
        f->plan.n_recipients < (size_t)f->opts.copy_min)
        return;
    for (; f->rows_done < f->plan.n_recipients; f->rows_done++) {
        const crier_plan_recipient *pr = &f->plan.recipients[f->rows_done];
        for (size_t d = pr->first_delivery; d < pr->first_delivery + pr->n_deliveries; d++)
            if (f->plan.deliveries[d].timing || !strcmp(f->plan.deliveries[d].channel, "feed")) {
                f->rows_dropped = true;
                return;
            }
        crier_key_parts kp = fanout_key_parts(f, pr);
        const fanout_event *e = &f->events[pr->slot];
        (void)crier_fanout_rows_add(&f->rows, &kp, e->id, crier_strbuf_at(&f->strings, e->created),
                                    crier_rules_version(f->rules), &f->plan, pr);
    }
}

/* SQL_IDS: an id for each planned notification, and whether a recipient
 * whose deliveries honour preferences has any. */
static void fanout_send_ids(crier_fanout *f)
{
    crier_pg_array_begin(&f->settings_cols[SETTINGS_TENANT], CRIER_PG_TEXT);
    crier_pg_array_begin(&f->settings_cols[SETTINGS_RECIPIENT], CRIER_PG_TEXT);
    for (size_t r = 0; r < f->plan.n_recipients; r++) {
        const crier_plan_recipient *pr = &f->plan.recipients[r];
        for (size_t d = pr->first_delivery; d < pr->first_delivery + pr->n_deliveries; d++) {
            if (!f->plan.deliveries[d].honor_preferences)
                continue;
            crier_pg_array_add_str(&f->settings_cols[SETTINGS_TENANT],
                                   crier_strbuf_at(&f->strings, f->events[pr->slot].tenant));
            crier_pg_array_add_str(&f->settings_cols[SETTINGS_RECIPIENT], pr->recipient);
            break;
        }
    }
    snprintf(f->ids_text, sizeof f->ids_text, "%zu", f->plan.n_recipients);
    crier_pg_params_reset(&f->params);
    crier_pg_params_text(&f->params, f->ids_text);
    crier_pg_params_array(&f->params, &f->settings_cols[SETTINGS_TENANT]);
    crier_pg_params_array(&f->params, &f->settings_cols[SETTINGS_RECIPIENT]);
    crier_pg_params_text(&f->params, f->plan.n_audience_items ? NULL : "off"); /* NULL: as it was */
    fanout_send_as(f, FANOUT_IDS, "crier_fanout_ids", SQL_IDS, &f->params);
}

/* Sends one COPY of the batch's rows. */
static void fanout_send_copy(crier_fanout *f, fanout_state next, const char *sql, const crier_pg_copy *rows)
{
    f->state = next;
    fanout_sent(f, crier_pg_copy_in(f->pg, sql, rows->data, rows->len, fanout_result, f));
}

/* SQL_IDS answered: the rows go in by COPY, or (a recipient has preferences)
 * through SQL_WRITE. */
/* The k-th id SQL_IDS drew (ud: its result). */
static int64_t fanout_drawn_id(void *ud, size_t k)
{
    return strtoll(PQgetvalue((const PGresult *)ud, (int)k, 0), NULL, 10);
}

static void fanout_on_ids(crier_fanout *f, PGresult *res)
{
    if ((size_t)PQntuples(res) < f->plan.n_recipients) {
        fanout_abort(f, "the notifications' ids were not drawn");
        return;
    }
    if (PQgetvalue(res, 0, 1)[0] == 't') {
        fanout_add_rows(f);
        fanout_send_write(f);
        return;
    }
    f->copy_rows = true;
    crier_fanout_rows_set_ids(&f->rows, fanout_drawn_id, res);
    fanout_send_copy(f, FANOUT_COPY_NOTIFICATIONS, SQL_COPY_NOTIFICATIONS, &f->rows.notifications);
}

/* The batch's notifications and their deliveries into the write's arrays
 * (the COPY path's rows: fanout_rows_extend). A key planned twice in one
 * batch is kept once. */
static void fanout_add_rows(crier_fanout *f)
{
    crier_pg_array *c = f->cols;
    char key[2048];

    crier_key_set_reset(&f->seen, f->plan.n_recipients);

    for (size_t r = 0; r < f->plan.n_recipients; r++) {
        const crier_plan_recipient *pr = &f->plan.recipients[r];
        fanout_event *e = &f->events[pr->slot];
        crier_key_parts kp = fanout_key_parts(f, pr);
        uint8_t h[CRIER_KEY_HASH_LEN];
        char message_id[CRIER_KEY_ID_LEN + 1];
        crier_key_hash(&kp, h);
        if (!crier_key_set_insert(&f->seen, h))
            continue; /* the same notification twice in one batch: keep the first */
        size_t klen = crier_key_readable(&kp, key, sizeof key);
        crier_key_hash_id(h, message_id);
        if (klen >= sizeof key)
            klen = sizeof key - 1;
        crier_pg_array_add_uuid(&c[WRITE_KEY_HASH], h);
        crier_pg_array_add_text(&c[WRITE_KEY], key, klen);
        crier_pg_array_add_int64(&c[WRITE_EVENT_ID], e->id);
        crier_pg_array_add_str(&c[WRITE_TENANT], kp.tenant);
        crier_pg_array_add_str(&c[WRITE_EVENT_TYPE], kp.event_type);
        crier_pg_array_add_str(&c[WRITE_ENTITY_ID], kp.entity_id);
        crier_pg_array_add_str(&c[WRITE_RECIPIENT_ID], kp.recipient_id);
        crier_pg_array_add_str(&c[WRITE_DISCRIMINATOR], kp.discriminator);
        for (size_t d = pr->first_delivery; d < pr->first_delivery + pr->n_deliveries; d++) {
            const crier_plan_delivery *pd = &f->plan.deliveries[d];
            crier_pg_array_add_int64(&c[WRITE_DELIVERY_OF], (int64_t)c[WRITE_KEY_HASH].count);
            crier_pg_array_add_str(&c[WRITE_CHANNEL], pd->channel);
            crier_pg_array_add_str(&c[WRITE_TARGET], pd->target);
            crier_pg_array_add_text(&c[WRITE_BODY], pd->body, pd->body_len);
            crier_pg_array_add_str(&c[WRITE_SECRET], pd->secret);
            crier_pg_array_add_str(&c[WRITE_SUBJECT], pd->subject);
            crier_pg_array_add_str(&c[WRITE_HTML], pd->html);
            crier_pg_array_add_str(&c[WRITE_SENDER], pd->sender);
            crier_pg_array_add_str(&c[WRITE_RETRY], pd->retry);
            crier_pg_array_add_bool(&c[WRITE_HONOR_PREFERENCES], pd->honor_preferences);
            crier_pg_array_add_text(&c[WRITE_MESSAGE_ID], message_id, CRIER_KEY_ID_LEN);
            crier_pg_array_add_str(&c[WRITE_TIMING], pd->timing);
            crier_pg_array_add_str(&c[WRITE_DELIVERY_TENANT], kp.tenant);
            crier_pg_array_add_str(&c[WRITE_DELIVERY_RECIPIENT], kp.recipient_id);
            crier_pg_array_add_str(&c[WRITE_DELIVERY_EVENT_TYPE], kp.event_type);
            crier_pg_array_add_str(&c[WRITE_DELIVERY_EMITTED], crier_strbuf_at(&f->strings, e->created));
            if (pd->timing)
                f->batch_timed++;
            if (strcmp(pd->channel, "feed") == 0)
                f->batch_feed++;
        }
    }
}

/* True when the write parameters cols[which[0..n-1]] are all empty arrays. */
static bool fanout_cols_empty(const crier_fanout *f, const int *which, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (f->cols[which[i]].count > 0)
            return false;
    return true;
}

/* Events that failed, have further pages, wrote audience items or go to the slow lane. */
static const int WRITE_EVENT_SIDES[] = {WRITE_FAILED_ID, WRITE_MORE_ID, WRITE_AUDIENCE_EVENT_ID, WRITE_SLOW_ID};
#define N_WRITE_EVENT_SIDES (sizeof WRITE_EVENT_SIDES / sizeof WRITE_EVENT_SIDES[0])

/* True when the batch's write has nothing for SQL_WRITE beyond events done
 * (SQL_WRITE_DONE). */
static bool fanout_write_is_done_only(const crier_fanout *f)
{
    static const int rows[] = {WRITE_KEY_HASH, WRITE_DELIVERY_OF};
    return fanout_cols_empty(f, rows, 2) && fanout_cols_empty(f, WRITE_EVENT_SIDES, N_WRITE_EVENT_SIDES);
}

/* True when the batch's write needs none of SQL_WRITE_REST beyond the events
 * done, and may commit without waiting for the WAL flush (SQL_WRITE_LEAN_REST). */
static bool fanout_write_is_lean(const crier_fanout *f)
{
    return f->batch_feed == 0 && f->batch_timed == 0 &&
           fanout_cols_empty(f, WRITE_EVENT_SIDES, N_WRITE_EVENT_SIDES);
}

/* Reserves room with the delivery worker for the deliveries the write may
 * lease and hand over (those not on the feed and without a timing; the
 * suppressed ones among them are given back after the batch): all or none,
 * and only on the statement path (a COPY batch's rows are not returned). */
static void fanout_reserve_handoff(crier_fanout *f)
{
    size_t planned = f->cols[WRITE_DELIVERY_OF].count, other = f->batch_feed + f->batch_timed;
    snprintf(f->handoff_lease_text, sizeof f->handoff_lease_text, "0");
    if (!f->handoff.reserve || planned <= other || planned - other > (size_t)INT_MAX)
        return;
    int n = (int)(planned - other);
    if (!f->handoff.reserve(f->handoff.ud, n))
        return;
    f->handoff_reserved = n;
    snprintf(f->handoff_lease_text, sizeof f->handoff_lease_text, "%d", f->handoff.lease_seconds);
}

/* The write statement, with the batch's arrays: SQL_WRITE_DONE when the batch
 * leaves only events done (so, mostly, after the COPY path), else
 * SQL_WRITE_CHECKED or SQL_WRITE_NEW (after the COPY path without
 * notifications). */
static void fanout_send_write(crier_fanout *f)
{
    crier_pg_array *c = f->cols;

    for (size_t a = 0; a < f->plan.n_audience_items; a++) {
        const crier_plan_audience_item *ai = &f->plan.audience_items[a];
        crier_pg_array_add_int64(&c[WRITE_AUDIENCE_EVENT_ID], f->events[ai->slot].id);
        crier_pg_array_add_str(&c[WRITE_AUDIENCE], ai->audience);
        crier_pg_array_add_str(&c[WRITE_AUDIENCE_CONTENT], ai->content);
        crier_pg_array_add_bool(&c[WRITE_AUDIENCE_BACKFILL], ai->backfill);
    }

    fanout_reserve_handoff(f);
    snprintf(f->max_attempts_text, sizeof f->max_attempts_text, "%d", f->opts.max_attempts);
    snprintf(f->copied_text, sizeof f->copied_text, "%zu", f->copy_rows ? f->rows.notifications.rows : 0);
    crier_pg_params_reset(&f->params);
    if (fanout_write_is_done_only(f)) {
        crier_pg_params_array(&f->params, &c[WRITE_DONE_ID]);
        crier_pg_params_text(&f->params, crier_rules_version(f->rules));
        crier_pg_params_text(&f->params, f->copied_text);
        fanout_send_write_as(f, "crier_fanout_write_done", SQL_WRITE_DONE);
        return;
    }
    for (int i = 0; i < N_WRITE_PARAMS; i++) {
        if (i == WRITE_RULES_VERSION)
            crier_pg_params_text(&f->params, crier_rules_version(f->rules));
        else if (i == WRITE_MAX_ATTEMPTS)
            crier_pg_params_text(&f->params, f->max_attempts_text);
        else if (i == WRITE_COPIED)
            crier_pg_params_text(&f->params, f->copied_text);
        else if (i == WRITE_HANDOFF_LEASE)
            crier_pg_params_text(&f->params, f->handoff_lease_text);
        else
            crier_pg_params_array(&f->params, &c[i]);
    }
    if (fanout_write_is_lean(f))
        fanout_send_write_as(f, f->write_checked ? "crier_fanout_write_checked_lean" : "crier_fanout_write_new_lean",
                             f->write_checked ? SQL_WRITE_CHECKED_LEAN : SQL_WRITE_NEW_LEAN);
    else
        fanout_send_write_as(f, f->write_checked ? "crier_fanout_write_checked" : "crier_fanout_write_new",
                             f->write_checked ? SQL_WRITE_CHECKED : SQL_WRITE_NEW);
}

/* crier_rules_batch_recipients' callback: one (tenant, recipient) pair of SQL_SETTINGS. */
static int fanout_add_recipient(void *ud, const char *tenant, const char *recipient_id)
{
    crier_fanout *f = ud;
    crier_pg_array_add_str(&f->settings_cols[SETTINGS_TENANT], tenant);
    crier_pg_array_add_str(&f->settings_cols[SETTINGS_RECIPIENT], recipient_id);
    return 0;
}

/* Stored settings exist: the rules list the recipients of every locked event
 * (kept for the plan), and one statement reads those recipients' settings;
 * with no recipient, the batch is planned at once. */
static void fanout_load_settings(crier_fanout *f)
{
    double now = crier_clock_s();
    crier_pg_array_begin(&f->settings_cols[SETTINGS_TENANT], CRIER_PG_TEXT);
    crier_pg_array_begin(&f->settings_cols[SETTINGS_RECIPIENT], CRIER_PG_TEXT);
    f->batch_settings = true;
    for (size_t i = 0; i < f->n_events; i++) {
        fanout_event *e = &f->events[i];
        if (!e->locked || (f->opts.lane == CRIER_FANOUT_LANE_FAST &&
                           fanout_type_is_slow(f, crier_strbuf_at(&f->strings, e->event_type), now)))
            continue;
        crier_rule_event ev = fanout_rule_event(f, i);
        /* (a recipients function that queries is left to the plan, which
         * hands its event to the slow lane: fanout_take_rules) */
        (void)crier_rules_batch_recipients(f->rules, &ev, fanout_add_recipient, f);
    }
    if (f->settings_cols[SETTINGS_TENANT].count == 0) {
        fanout_plan_begin(f);
        return;
    }
    crier_pg_params_reset(&f->params);
    for (int i = 0; i < N_SETTINGS_PARAMS; i++)
        crier_pg_params_array(&f->params, &f->settings_cols[i]);
    fanout_send(f, FANOUT_SETTINGS, SQL_SETTINGS, &f->params);
}

static void fanout_on_write(crier_fanout *f, PGresult *res)
{
    /* SQL_WRITE_DONE: the summary alone; SQL_WRITE: after a handed delivery's columns */
    int base = PQnfields(res) > WRITE_HANDED_COLS + WRITTEN_DEAD ? WRITE_HANDED_COLS : 0;
    uint64_t created = strtoull(PQgetvalue(res, 0, base + WRITTEN_NOTIFICATIONS), NULL, 10);
    uint64_t deliveries = strtoull(PQgetvalue(res, 0, base + WRITTEN_DELIVERIES), NULL, 10);
    uint64_t done = strtoull(PQgetvalue(res, 0, base + WRITTEN_DONE), NULL, 10);
    uint64_t dead = strtoull(PQgetvalue(res, 0, base + WRITTEN_DEAD), NULL, 10);
    uint64_t failed = f->cols[WRITE_FAILED_ID].count;
    uint64_t planned = f->cols[WRITE_KEY_HASH].count;

    if (f->copy_rows) { /* the rows went in by COPY before this statement */
        f->stats.notifications_copied += f->rows.notifications.rows;
        created += f->rows.notifications.rows;
        planned += f->rows.notifications.rows;
        deliveries += f->rows.deliveries.rows;
    }

    f->stats.batches++;
    f->stats.events_done += done;
    f->stats.events_dead += dead;
    f->stats.events_failed += failed - dead;
    f->stats.notifications_created += created;
    f->stats.notifications_duplicate += planned - created;
    f->stats.deliveries_created += deliveries;
    f->batch_deliveries = deliveries;
    if (base > 0 && f->handoff_reserved > 0) {
        int rows = PQntuples(res);
        for (int i = 0; i < rows; i++)
            f->batch_handed += !PQgetisnull(res, i, 0);
        if (f->batch_handed > 0) { /* the rows go to the delivery worker after the commit */
            crier_pg_keep_result(f->pg);
            f->handoff_res = res;
            f->stats.deliveries_handed += f->batch_handed;
        } else {
            fanout_handoff_end(f, false); /* none leased: the room is given back now */
        }
    }
    crier_debug("fanout", "batch: %zu events, %llu done, %llu notifications new, %llu duplicate, %llu deliveries",
                f->n_events, (unsigned long long)done, (unsigned long long)created,
                (unsigned long long)(planned - created), (unsigned long long)deliveries);
    if (f->batch_timed > 0) {
        /* deliveries with a timing: decided before the batch commits */
        fanout_send(f, FANOUT_TIMING, SQL_TIMING, NULL);
        return;
    }
    f->state = FANOUT_COMMIT; /* sent with the write (fanout_send_write_as): its result comes next */
}

/* True when res is the unique index on notification keys refusing a key. */
static bool fanout_met_existing_key(const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    return state && strcmp(state, "23505") == 0 && constraint &&
           strcmp(constraint, "notifications_key_hash_key") == 0;
}

static void fanout_result(void *ud, PGresult *res, const char *err)
{
    crier_fanout *f = ud;
    fanout_state was = f->state;
    char msg[1024];

    if (!res) {
        f->state = FANOUT_IDLE;
        fanout_abort(f, err);
        return;
    }
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK &&
        (was == FANOUT_WRITE || was == FANOUT_COPY_NOTIFICATIONS) && !f->write_checked &&
        fanout_met_existing_key(res)) {
        /* not an error: the batch runs again with SQL_WRITE_CHECKED */
        crier_info("fanout", "a notification of this batch of %zu events exists already: the batch is "
                             "rolled back and runs again skipping existing keys (and so do this worker's "
                             "batches for the next %.0f s)",
                   f->n_events, FANOUT_CHECKED_SECONDS);
        f->checked_until = crier_clock_s() + FANOUT_CHECKED_SECONDS;
        f->redo = true;
        f->n_events = 0;
        fanout_send(f, FANOUT_ROLLBACK, "ROLLBACK", NULL);
        return;
    }
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(msg, sizeof msg, "%s", PQresultErrorMessage(res));
        if (was == FANOUT_ROLLBACK) {
            f->state = FANOUT_IDLE;
            fanout_abort(f, msg);
        } else {
            fanout_abort(f, msg);
        }
        return;
    }
    switch (was) {
    case FANOUT_CLAIM:
        fanout_on_claim(f, res);
        break;
    case FANOUT_SETTINGS:
        if (crier_rules_set_batch_settings(f->rules, res) != 0)
            crier_warn("fanout", "the stored settings of a batch could not be handed to the rules; it is "
                                 "planned without them");
        fanout_plan_begin(f);
        break;
    case FANOUT_IDS:
        fanout_on_ids(f, res);
        break;
    case FANOUT_COPY_NOTIFICATIONS:
        if (f->rows.deliveries.rows > 0) {
            fanout_send_copy(f, FANOUT_COPY_DELIVERIES, SQL_COPY_DELIVERIES, &f->rows.deliveries);
            break;
        }
        fanout_send_write(f);
        break;
    case FANOUT_COPY_DELIVERIES:
        fanout_send_write(f);
        break;
    case FANOUT_WRITE:
        fanout_on_write(f, res);
        break;
    case FANOUT_TIMING:
        fanout_send(f, FANOUT_COMMIT, "COMMIT", NULL);
        break;
    case FANOUT_COMMIT: {
        f->state = FANOUT_IDLE;
        f->n_events = 0;
        /* handed over: the delivery worker sends them without being told to claim */
        uint64_t announced = f->batch_deliveries - f->batch_handed;
        fanout_handoff_end(f, true);
        if ((announced || f->cols[WRITE_SLOW_ID].count) && f->committed)
            f->committed(f->committed_ud, announced, f->cols[WRITE_SLOW_ID].count);
        f->batch_deliveries = 0;
        /* more is due at once: the batch was full, or an audience has pages left */
        if (f->batch_full || f->released || f->cols[WRITE_MORE_ID].count > 0)
            f->kicked = true;
        fanout_step(f);
        break;
    }
    case FANOUT_ROLLBACK:
        fanout_handoff_end(f, false);
        f->state = FANOUT_IDLE;
        if (f->redo) { /* the batch met an existing key: claim again now, checked */
            f->redo = false;
            f->kicked = true;
            fanout_step(f);
            break;
        }
        if (!ev_is_active(&f->retry)) {
            ev_timer_set(&f->retry, 1.0, 0.);
            ev_timer_start(f->loop, &f->retry);
        }
        break;
    case FANOUT_PLAN: /* (no statement is in flight while the rules run) */
    case FANOUT_IDLE:
        break;
    }
}

/* Makes rules the generation this worker plans with. The fast lane runs on
 * crier serve's main loop: a rule's query (a round trip, a page of a large
 * audience, a slow statement) would stall every other worker there, so its
 * generation defers queries and such events are planned in the slow lane's
 * thread, where waiting stalls nothing else. */
static void fanout_take_rules(crier_fanout *f, crier_rules *rules)
{
    f->rules = rules;
    crier_rules_defer_queries(rules, f->opts.lane == CRIER_FANOUT_LANE_FAST);
}

/* Starts a batch if one is wanted and none is running. */
static void fanout_step(crier_fanout *f)
{
    if (f->state != FANOUT_IDLE || !f->kicked || f->stopping || ev_is_active(&f->retry))
        return;
    if (f->next_rules) {
        crier_rules_free(f->rules);
        fanout_take_rules(f, f->next_rules);
        f->next_rules = NULL;
        crier_info("fanout", "now using rules version %.12s", crier_rules_version(f->rules));
    }
    f->kicked = false;
    f->state = FANOUT_CLAIM;
    fanout_sent(f, crier_pg_query_script(f->pg, f->begin_claim, fanout_result, f));
}

crier_fanout *crier_fanout_new(struct ev_loop *loop, crier_pg *pg, crier_rules *rules,
                               const crier_fanout_options *opts, crier_fanout_committed_fn committed,
                               void *ud)
{
    crier_fanout *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->loop = loop;
    f->pg = pg;
    f->opts.batch_size = opts && opts->batch_size > 0 ? opts->batch_size : 500;
    f->opts.max_attempts = opts && opts->max_attempts > 0 ? opts->max_attempts : 5;
    f->opts.lane = opts ? opts->lane : CRIER_FANOUT_LANE_FAST;
    f->opts.slow_after = opts && opts->slow_after > 0 ? opts->slow_after : 0.1;
    f->opts.batch_budget = opts && opts->batch_budget > 0 ? opts->batch_budget : 2.0;
    f->opts.copy_min = opts && opts->copy_min > 0 ? opts->copy_min : 256;
    snprintf(f->begin_claim, sizeof f->begin_claim, SQL_BEGIN_CLAIM, f->opts.batch_size, (int)f->opts.lane);
    fanout_take_rules(f, rules);
    f->committed = committed;
    f->committed_ud = ud;
    ev_timer_init(&f->retry, fanout_retry_cb, 1.0, 0.);
    f->retry.data = f;
    ev_timer_init(&f->plan_more, fanout_plan_more_cb, 0., 0.);
    f->plan_more.data = f;
    return f;
}

void crier_fanout_kick(crier_fanout *f)
{
    f->kicked = true;
    fanout_step(f);
}

void crier_fanout_set_rules(crier_fanout *f, crier_rules *rules)
{
    if (f->next_rules)
        crier_rules_free(f->next_rules);
    f->next_rules = rules;
    f->kicked = true;
    fanout_step(f);
}

bool crier_fanout_idle(const crier_fanout *f)
{
    return f->state == FANOUT_IDLE && !f->kicked && f->last_empty && !ev_is_active(&f->retry);
}

bool crier_fanout_between_batches(const crier_fanout *f)
{
    return f->state == FANOUT_IDLE;
}

bool crier_fanout_holds_events(const crier_fanout *f)
{
    return f->state > FANOUT_CLAIM;
}

int crier_fanout_in_flight(const crier_fanout *f)
{
    return f->state == FANOUT_IDLE ? 0 : (int)f->n_events;
}

void crier_fanout_stop(crier_fanout *f)
{
    f->stopping = true;
    ev_timer_stop(f->loop, &f->retry);
}

const crier_fanout_stats *crier_fanout_get_stats(const crier_fanout *f)
{
    return &f->stats;
}

void crier_fanout_stats_add(crier_fanout_stats *dst, const crier_fanout_stats *src)
{
    dst->batches += src->batches;
    dst->events_done += src->events_done;
    dst->events_failed += src->events_failed;
    dst->events_dead += src->events_dead;
    dst->events_skipped_locked += src->events_skipped_locked;
    dst->notifications_created += src->notifications_created;
    dst->notifications_copied += src->notifications_copied;
    dst->notifications_duplicate += src->notifications_duplicate;
    dst->deliveries_created += src->deliveries_created;
    dst->deliveries_handed += src->deliveries_handed;
    dst->pages += src->pages;
    dst->events_slowed += src->events_slowed;
    dst->events_released += src->events_released;
}

void crier_fanout_set_handoff(crier_fanout *f, const crier_fanout_handoff *handoff)
{
    f->handoff = handoff ? *handoff : (crier_fanout_handoff){0};
}

void crier_fanout_free(crier_fanout *f)
{
    if (!f)
        return;
    ev_timer_stop(f->loop, &f->retry);
    ev_timer_stop(f->loop, &f->plan_more);
    fanout_handoff_end(f, false);
    crier_rules_free(f->rules);
    crier_rules_free(f->next_rules);
    for (size_t i = 0; i < N_SETTINGS_PARAMS; i++)
        crier_pg_array_free(&f->settings_cols[i]);
    for (size_t i = 0; i < N_WRITE_PARAMS; i++)
        crier_pg_array_free(&f->cols[i]);
    crier_strbuf_free(&f->strings);
    crier_fanout_rows_free(&f->rows);
    crier_plan_free(&f->plan);
    crier_key_set_free(&f->seen);
    free(f->events);
    free(f);
}
