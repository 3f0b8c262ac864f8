/* http_framing.h — refuses a request whose length a proxy in front of crier
 * could read differently from libmicrohttpd (request smuggling): framing
 * headers that conflict, repeat or hide, checked when the headers have
 * arrived and before any of the body is read.
 *
 * What libmicrohttpd 0.9.75 (Debian 12) does by itself, and so what is left
 * to this check:
 * - Content-Length twice: it uses the first and reads what follows the
 *   first length as the next request; with Transfer-Encoding it uses
 *   chunked; any Transfer-Encoding other than exactly "chunked" makes it
 *   read the body until the client closes; it takes Transfer-Encoding in
 *   HTTP/1.0 requests. This check refuses all of these.
 * - A space before a header's colon stays in the header's name, and a
 *   folded line (obs-fold: a line starting with a space or tab) is appended
 *   to the header's *name* ("Content-Length: 5\r\n 0" becomes a header
 *   "Content-Length0: 5"): libmicrohttpd then sees no Content-Length at all.
 *   This check refuses header names that are not tokens and names that
 *   start like a framing header without being one. A fold that leaves no
 *   such trace cannot be seen after libmicrohttpd's parse.
 * - A Content-Length that is not a plain number (a sign, an inner or
 *   trailing space, a list "5, 5") it refuses itself with its own 400 page
 *   and closes the connection, before crier sees the request.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: log (base).
 */
#ifndef CRIER_HTTP_FRAMING_H
#define CRIER_HTTP_FRAMING_H

#include <microhttpd.h>
#include <stddef.h>

/* Checks the framing headers of the request on conn (version: its HTTP
 * version, as libmicrohttpd gives it). Returns 0 when they are unambiguous:
 * at most one Content-Length, or one "Transfer-Encoding: chunked" in an
 * HTTP/1.1 request without Content-Length, and every header name a token
 * that is not a framing header in disguise. Returns -1 with err set to a
 * sentence saying what was wrong and what to send instead; the caller
 * answers 400 and closes the connection. */
int crier_http_framing_check(struct MHD_Connection *conn, const char *version, char *err,
                             size_t err_len);

#endif
