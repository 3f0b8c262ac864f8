/* rules.h — one generation of Lua rules: a lua_State with the crier library and
 * every rule file of a rules directory loaded and validated, and the call that
 * runs one event through them to produce its fan-out plan.
 *
 * Layer: rules (src/rules/), may use base.
 * Calls into: log (base).
 */
#ifndef CRIER_RULES_H
#define CRIER_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct crier_rules crier_rules;

typedef struct {
    const char *name;
    const char *value;
} crier_setting;

/* One event handed to the rules. */
typedef struct {
    int64_t id;
    const char *tenant;
    const char *event_type;
    const char *entity_id;
    const char *payload_json; /* JSON object text */
    const char *cursor;       /* paged audiences (crier.pages): where this page starts, NULL for the first */
    size_t slot;              /* caller's index for this event; copied into the plan rows */
    double slow_after;        /* > 0: wall seconds the rule may run before the call stops with
                                 CRIER_PLAN_SLOW (a soft limit under the rules' own) */
} crier_rule_event;

/* One delivery of a planned notification (one channel). */
typedef struct {
    const char *channel; /* "webhook", "email" or "kafka" */
    const char *target;  /* webhook URL, email recipient address or Kafka topic */
    const char *body;    /* webhook JSON body, email text part or Kafka message value */
    size_t body_len;
    const char *secret;  /* webhook: "whsec_…" signing secret(s), space-separated, or NULL */
    const char *subject; /* email subject, or NULL */
    const char *html;    /* email HTML part, or NULL */
    const char *sender;  /* email From address, or NULL for the configured default */
    const char *retry;   /* retry schedule as a PostgreSQL int[] literal "{0,5,300}", or NULL
                            for the channel's default */
    bool honor_preferences; /* false when the event type is required or the rule ignores
                               preferences: the recipient's stored opt-outs do not apply */
    const char *timing;  /* when and how many (delay, throttle, digest) as JSON text
                            (lua/crier/timing.lua), or NULL: due at once */
} crier_plan_delivery;

/* One planned notification: one recipient of one event. */
typedef struct {
    size_t slot;               /* the event's slot */
    const char *recipient;
    const char *discriminator; /* NULL when the rule gives none */
    size_t first_delivery;     /* index into crier_plan.deliveries */
    size_t n_deliveries;
} crier_plan_recipient;

/* One item of a rule in mode "read": stored once for an audience (feeds). */
typedef struct {
    size_t slot;          /* the event's slot */
    const char *audience;
    const char *content;  /* JSON object */
    bool backfill;        /* members who join later see it too */
} crier_plan_audience_item;

/* An accumulator of plan rows for a batch of events. Strings live in the plan's
 * own storage until crier_plan_reset or crier_plan_free. Zero-initialise before use. */
typedef struct {
    crier_plan_recipient *recipients;
    size_t n_recipients, cap_recipients;
    crier_plan_delivery *deliveries;
    size_t n_deliveries, cap_deliveries;
    char **blocks; /* string storage */
    size_t n_blocks, cap_blocks;
    size_t block_used, block_size;
    crier_plan_audience_item *audience_items;
    size_t n_audience_items, cap_audience_items;
    /* Set by each crier_rules_plan: the cursor of the event's next page when
     * its audience is paged and more remains, else NULL. */
    const char *next_cursor;
    /* Set by each crier_rules_plan: true when it failed with
     * CRIER_PLAN_RULE_ERROR because the rule exceeded one of its limits
     * (instructions, time, memory). */
    bool limit_exceeded;
    /* Set by each crier_rules_plan: true when it returned CRIER_PLAN_SLOW
     * because the rule called crier.query while queries were deferred
     * (crier_rules_defer_queries). */
    bool query_deferred;
} crier_plan;

typedef enum {
    CRIER_PLAN_OK = 0,
    CRIER_PLAN_UNKNOWN_TYPE,     /* no rule declares this event type */
    CRIER_PLAN_INVALID_PAYLOAD,  /* payload is not valid JSON or fails the type's schema */
    CRIER_PLAN_RULE_ERROR,       /* the rule raised an error (message has a traceback) */
    CRIER_PLAN_SLOW              /* the rule ran past ev->slow_after: not a failure; plan it
                                    again without the soft limit */
} crier_plan_status;

/* Loads every *.lua file directly in rules_dir (sorted by name, *_spec.lua
 * skipped) into a new lua_State with the crier library from lua_dir. settings are
 * visible to rules through crier.setting(name[, default]). Returns the new
 * generation, or NULL with every problem in err as "file:line: message" lines
 * (a directory without rule files is refused: "DIR: no rules here: …"). */
crier_rules *crier_rules_load(const char *lua_dir, const char *rules_dir,
                              const crier_setting *settings, size_t n_settings,
                              char *err, size_t err_len);

/* The rules version: hex SHA-256 over the loaded files' names and contents. */
const char *crier_rules_version(const crier_rules *rules);

/* Runs ev through the rules and appends its recipients and deliveries to plan.
 * On any status but OK nothing is appended and err holds the reason. */
crier_plan_status crier_rules_plan(crier_rules *rules, const crier_rule_event *ev,
                                   crier_plan *plan, char *err, size_t err_len);

/* Stored settings for a fan-out batch (crier.recipient_settings: time zone,
 * locale, quiet hours; lua/crier/runtime.lua, gen:batch_recipients):
 * crier_rules_batch_recipients runs the rules' recipients of ev (kept for its
 * crier_rules_plan in the same batch) and calls fn(ud, tenant, recipient_id)
 * for each distinct recipient (an event whose rule fails gives none: its plan
 * reports the error); fn returns 0, or -1 to stop. Returns 0, or -1 when the
 * call failed or fn stopped it (logged). crier_rules_set_batch_settings hands
 * the stored rows (columns tenant, recipient_id, time_zone, locale,
 * quiet_hours) to the generation, whose plans apply them until
 * crier_rules_end_batch; returns 0, or -1 when a column is missing or the call
 * failed. */
struct pg_result;
typedef int (*crier_rules_recipient_fn)(void *ud, const char *tenant, const char *recipient_id);
int crier_rules_batch_recipients(crier_rules *rules, const crier_rule_event *ev, crier_rules_recipient_fn fn,
                                 void *ud);
int crier_rules_set_batch_settings(crier_rules *rules, const struct pg_result *res);
void crier_rules_end_batch(crier_rules *rules);

/* Renders the message of a digest whose window closed: input_json is what
 * crier.fire_timers returns for it (its rule's event type, channel, recipient
 * and items). Appends one recipient with one delivery to plan (slot as given).
 * On any status but OK nothing is appended and err holds the reason
 * (CRIER_PLAN_UNKNOWN_TYPE: the rule or its digest block is gone). */
crier_plan_status crier_rules_render_digest(crier_rules *rules, const char *input_json, size_t slot,
                                            crier_plan *plan, char *err, size_t err_len);

/* Checks that event_type is declared and payload_json satisfies its schema
 * (used at intake). Returns CRIER_PLAN_OK or the failing status with err set. */
crier_plan_status crier_rules_validate(crier_rules *rules, const char *event_type,
                                       const char *payload_json, char *err, size_t err_len);

/* How crier.query runs: sql with n text parameters (NULL values are SQL
 * NULL), read-only. Returns a PGresult with the rows (the caller clears it),
 * or NULL with err set. */
typedef struct pg_result *(*crier_rules_query_fn)(void *ud, const char *sql, int n, const char *const *values,
                                                  char *err, size_t err_len);

/* Gives the generation's crier.query objects a backend (fn NULL: none, and a
 * rule that queries fails with an error saying so). */
void crier_rules_set_query(crier_rules *rules, crier_rules_query_fn fn, void *ud);

/* defer true: a crier.query during crier_rules_plan does not run; the plan
 * ends with CRIER_PLAN_SLOW and plan->query_deferred (whatever the rule made
 * of the error it got), so that the caller plans the event where waiting on
 * the database stalls nothing else (crier serve's fast lane, on the main
 * loop, hands such events to the slow lane's thread). */
void crier_rules_defer_queries(crier_rules *rules, bool defer);

/* Gives the generation's queries fake rows instead of a database (crier try
 * with "queries" in EVENT.json): json is an object of query name -> rows
 * (see runtime.fake_query_backend). Returns 0, or -1 with err set. */
int crier_rules_set_fake_queries(crier_rules *rules, const char *json, char *err, size_t err_len);

/* Renders plans as for recipients whose locale is tag (crier try --locale;
 * it replaces the locale the rules give), or as the rules say when tag is
 * NULL. Returns 0, or -1 with err set when tag is not a locale tag. */
int crier_rules_set_recipient_locale(crier_rules *rules, const char *tag, char *err, size_t err_len);

/* Empties plan, keeping its memory for reuse. */
void crier_plan_reset(crier_plan *plan);
/* Frees plan's memory (the struct itself is the caller's). */
void crier_plan_free(crier_plan *plan);

/* The recurring schedules the rules declare (crier.schedule), as the JSON
 * array crier.fire_schedules takes: "[]" when there are none (or, logged,
 * when the rules fail to list them). Owned by rules, valid until it is
 * freed. */
const char *crier_rules_schedules_json(crier_rules *rules);

/* The schedules as text for crier check: one line each with its cron, zone,
 * tenants, event type, catch-up and next occurrence after now (Unix
 * seconds), "" when there are none. Returns a malloc'd string (the caller
 * frees it), or NULL with err set. */
char *crier_rules_describe_schedules(crier_rules *rules, double now, char *err, size_t err_len);

/* Closes the generation's lua_State. NULL is a no-op. */
void crier_rules_free(crier_rules *rules);

#endif
