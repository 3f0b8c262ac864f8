/* fanout_rows.h — a fan-out batch's notifications and deliveries as COPY
 * rows, built while the batch is still being planned, before their ids exist.
 *
 * The COPY path of a batch (fanout.c, SQL_IDS) needs the notifications' ids,
 * which the server draws from their sequence only once the batch is planned.
 * Building the rows after that (2,500 notifications and their deliveries:
 * 3-4 ms of keys, hashes and escaping) left the connection's backend idle
 * meanwhile. So the rows are built as the rules plan each slice of the batch,
 * with each id a fixed-width field of zeros, and the ids are written into
 * those fields when they arrive (PostgreSQL reads "0000000000000000123" as
 * 123). A notification whose key the batch has already planned is left out
 * (the first is kept), as the statement path does.
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: pg_copy (the text format), keys (hash, readable key, message id).
 */
#ifndef CRIER_FANOUT_ROWS_H
#define CRIER_FANOUT_ROWS_H

#include "keys.h"
#include "pg_copy.h"
#include "rules.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A set of 128-bit key hashes: the notifications one batch planned, so that
 * it never carries the same notification twice. Grows as keys are added;
 * keeps its memory from batch to batch. Zero-initialise before use. */
typedef struct {
    uint8_t (*slots)[CRIER_KEY_HASH_LEN];
    bool *used;
    size_t cap, count;
} crier_key_set;

/* Empties the set and makes room for n keys without growing. */
void crier_key_set_reset(crier_key_set *s, size_t n);
/* Adds h: true when it was not in the set yet. */
bool crier_key_set_insert(crier_key_set *s, const uint8_t h[CRIER_KEY_HASH_LEN]);
void crier_key_set_free(crier_key_set *s);

/* Where an id goes: the field at off in the notifications' (deliveries
 * false) or the deliveries' rows, the id of the batch's kept notification k. */
typedef struct {
    size_t off;
    size_t k;
    bool deliveries;
} crier_fanout_id_field;

typedef struct {
    crier_pg_copy notifications, deliveries;
    crier_key_set seen;
    size_t kept; /* notifications in the rows (distinct keys) */
    crier_fanout_id_field *ids;
    size_t n_ids, cap_ids;
} crier_fanout_rows;

/* Empties the rows, keeping their memory. */
void crier_fanout_rows_reset(crier_fanout_rows *r);

/* Adds one planned recipient of the batch: its notification (key parts kp,
 * its event's id, the rules' version) and its deliveries (their
 * emitted_at: the event's commit time as text; plan's
 * deliveries first_delivery … + n_deliveries), ids still to come. Returns
 * false (and adds nothing) when the batch has this notification already. */
bool crier_fanout_rows_add(crier_fanout_rows *r, const crier_key_parts *kp, int64_t event_id,
                           const char *emitted_at, const char *rules_version, const crier_plan *plan,
                           const crier_plan_recipient *pr);

/* Writes the ids in: id_of(ud, k) is the id of kept notification k (0 <=
 * k < r->kept; positive, as a sequence draws them). */
void crier_fanout_rows_set_ids(crier_fanout_rows *r, int64_t (*id_of)(void *ud, size_t k), void *ud);

void crier_fanout_rows_free(crier_fanout_rows *r);

#endif
