/* http_operator.h — who may use the operator's status page (GET /, /status,
 * /status.json, POST /status/replay): nobody's tenant credential, but the
 * operator's.
 *
 *   - By default (no operator key): only clients on loopback (127.0.0.0/8,
 *     ::1) that name a loopback host (Host: 127.0.0.1:…, localhost:…,
 *     [::1]:…, so that a DNS-rebinding page cannot pass for the operator) and,
 *     when a browser sends an Origin, only from the page's own origin.
 *   - With an operator key (crier serve --operator-key, CRIER_OPERATOR_KEY):
 *     every data request needs Authorization: Bearer <key>, from any address;
 *     the HTML page itself holds no data and is served to anyone (it asks for
 *     the key, or takes it from the URL's #key= fragment, which browsers never
 *     send to the server).
 *   - A request that changes something (replay) cannot come from another site
 *     (CSRF): it needs the Bearer key or the X-Crier-Operator header, which
 *     a plain form cannot send and a cross-site script may not (no CORS
 *     preflight allows it).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_request.
 */
#ifndef CRIER_HTTP_OPERATOR_H
#define CRIER_HTTP_OPERATOR_H

#include "http_request.h"

#include <stdbool.h>

#define CRIER_OPERATOR_HEADER "X-Crier-Operator"
#define CRIER_OPERATOR_KEY_MIN 16 /* shortest operator key accepted */

typedef enum {
    CRIER_OPERATOR_PAGE,   /* the HTML page: no data in it */
    CRIER_OPERATOR_READ,   /* status.json */
    CRIER_OPERATOR_ACTION, /* replay: a change, never cross-site */
} crier_operator_access;

/* Checks that r may use the status page as access says (above). Returns 0,
 * or -1 with the response set: 403 operator_only (not loopback, a foreign
 * Host or Origin), 401 unauthorized / invalid_operator_key (an operator key
 * is set and not sent, or another one), 403 csrf_header_required (a change
 * without the Bearer key or the X-Crier-Operator header). For the page the
 * refusal is an HTML page saying the same. */
int crier_http_operator_check(crier_http_request *r, crier_operator_access access);

/* True when s compares equal to key, in time that depends on their lengths
 * only (not on where they differ). */
bool crier_http_operator_key_equal(const char *s, const char *key);

#endif
