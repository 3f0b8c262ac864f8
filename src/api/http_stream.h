/* http_stream.h — live feeds: Server-Sent Events for an open inbox, driven by
 * LISTEN/NOTIFY.
 *
 * One hub thread per HTTP API holds two PostgreSQL connections: one LISTENs on
 * crier_feed (triggers of sql/functions/feed_notify_* announce a person's new items and state
 * changes, an audience's new items, membership changes, at commit), the other
 * asks what changed. Each open stream remembers the snapshot (pg_snapshot) it
 * last read at; when its person is announced, the hub sends the items whose
 * transactions committed since that snapshot (crier.feed_change_ids: exact
 * whatever order transactions commit in), then the counts with the new
 * snapshot as the event id. A client that reconnects with Last-Event-ID gets
 * what it missed; a person with more than CRIER_STREAM_MAX_ITEMS new items (or
 * a membership change, which can reveal older backfilled items) gets a
 * `resync` event: reload the first page. Each item carries its head cursor
 * and each counts event the stream's (http_head.h): mark-all-read with them
 * covers exactly what the stream had sent.
 *
 * Connections are parked with MHD_suspend_connection while a stream has
 * nothing to send (no thread is held) and resumed by the hub. A comment line
 * every keepalive interval keeps proxies from closing idle streams and lets
 * the server notice clients that went away.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_pool, http_request, http_head (and http_feed_sql's item
 * JSON);
 * pg_array (pg); alloc, clock, json_writer, log (base).
 */
#ifndef CRIER_HTTP_STREAM_H
#define CRIER_HTTP_STREAM_H

#include "http_request.h"

#include <stdbool.h>
#include <stddef.h>

#define CRIER_STREAM_MAX_ITEMS 100       /* items per update before a resync instead */
#define CRIER_STREAM_MAX_BUFFER (1 << 20) /* unsent bytes before a slow client is cut off */

typedef struct crier_http_streams crier_http_streams;
typedef struct crier_http_stream crier_http_stream;

/* Starts the hub thread (it connects, and reconnects, by itself). keepalive
 * is the interval of comment lines in seconds. NULL with err set when out of
 * memory or no thread can start. */
crier_http_streams *crier_http_streams_start(const char *conninfo, double keepalive, char *err,
                                             size_t err_len);

/* Opens a stream of user's feed, in the tenant of the authenticated request
 * r, from the snapshot since (text, as pg_snapshot prints it): what committed
 * after it is sent first. resumed tells whether since came from the client
 * (Last-Event-ID). The stream keeps r's credential (and its tenant's secret,
 * which signs the head cursors): when a user token expires it sends an
 * `expired` event and ends; when the API key is revoked or the tenant's
 * secret rotated (checked every keepalive interval) a `revoked` event, and
 * ends; both carry the id to resume from. NULL when the hub is shutting
 * down. */
crier_http_stream *crier_http_streams_open(crier_http_streams *hub, const crier_http_request *r,
                                           const char *user, const char *since, bool resumed);

/* The response that plays the stream on conn (chunked, no length). The
 * response owns the stream from here on. NULL when out of memory (the stream
 * is dropped). */
struct MHD_Response *crier_http_stream_response(crier_http_stream *st, struct MHD_Connection *conn);

/* Drops a stream that will not be answered (its request failed later). */
void crier_http_stream_abandon(crier_http_stream *st);

/* Ends every open stream (each sends what it holds, then its last chunk) and
 * refuses new ones. Call before stopping the HTTP daemon: libmicrohttpd must
 * not be stopped with suspended connections. */
void crier_http_streams_close_all(crier_http_streams *hub);

/* Stops the hub thread and frees it; after the HTTP daemon has stopped.
 * NULL is a no-op. */
void crier_http_streams_stop(crier_http_streams *hub);

/* Appends the hub's Prometheus metrics. */
void crier_http_streams_metrics(crier_http_streams *hub, crier_json_buf *b);

#endif
