/* http_head.h — what "mark all read up to here" covers in a person's feed:
 * the head cursors that a first page (GET /v1/feed) and the live feed's
 * events hand out, and the database snapshots (pg_snapshot's text,
 * "xmin:xmax:xip,…") that bound them and that the live feed uses as its
 * event ids.
 *
 * A head cursor is a cursor (http_auth.h) of the list {"feed-head", user}:
 * its position is the highest position it covers, its signed text the
 * snapshots that bound which transactions it covers —
 *   - ""    (cursors made before the snapshots were signed in): the items up
 *           to the position that are visible when mark-all runs;
 *   - "S"   the items up to the position visible in S (a first page's own
 *           snapshot: an item committed after the page was read stays
 *           unread, whatever its position);
 *   - "S B" every item visible in B (what a live feed had sent before) and
 *           the items up to the position visible in S (the update that sent
 *           the item the cursor came with).
 * crier.feed_mark_all (sql/functions/feed_mark_all.sql) takes the three.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_auth, http_request.
 */
#ifndef CRIER_HTTP_HEAD_H
#define CRIER_HTTP_HEAD_H

#include "http_request.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRIER_HTTP_SNAPSHOT_MAX 4096 /* longest snapshot text accepted (Last-Event-ID, cursors) */

/* A decoded head cursor. */
typedef struct {
    int64_t upto;                               /* the highest position covered */
    const char *snapshot;                       /* S, or NULL (mark-all's own snapshot) */
    const char *since;                          /* B, or NULL */
    char text[2 * CRIER_HTTP_SNAPSHOT_MAX + 2]; /* where snapshot and since point */
} crier_http_head;

/* True when text is a syntactically valid pg_snapshot ("xmin:xmax:xip,…"
 * with xmin <= xip < xmax ascending, 0 < xmin <= xmax) of at most
 * CRIER_HTTP_SNAPSHOT_MAX bytes. */
bool crier_http_snapshot_valid(const char *text);

/* Signs the head cursor of user's feed covering upto, bounded by snapshot
 * (NULL: none) and since (NULL: none; only with a snapshot), with the
 * tenant's secret. Returns it malloc'd (the caller frees it), or NULL when a
 * snapshot is longer than CRIER_HTTP_SNAPSHOT_MAX (no cursor then). */
char *crier_http_head_sign(const unsigned char *secret, size_t secret_len, const char *user,
                           int64_t upto, const char *snapshot, const char *since);

/* Decodes a head cursor of user's feed (in r's tenant) into out. Returns 0,
 * or -1 with 400 invalid_cursor set when it is not one: forged, altered,
 * another person's or tenant's, or its snapshots are not snapshots. */
int crier_http_head_decode(crier_http_request *r, const char *cursor, const char *user,
                           crier_http_head *out);

#endif
