/* http_page.h — one page of a list endpoint (the feed, dead letters) as
 * JSON: {"items": [...], "next_cursor": ..., ...}, the items taken from a
 * statement's first column and each cursor signed for its list
 * (http_auth.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_auth; json_writer (base).
 */
#ifndef CRIER_HTTP_PAGE_H
#define CRIER_HTTP_PAGE_H

#include "http_request.h"

#include <libpq-fe.h>

/* Appends {"items":[…] with the JSON text in column 0 of the first limit rows
 * of res (the caller adds the rest of the object and the closing brace). */
void crier_http_page_items(crier_json_buf *b, const PGresult *res, int limit);

/* Appends ,"name": and the cursor (crier_http_cursor_encode with scope) of
 * row's columns first..first+n-1 as the position, or null when row < 0. */
void crier_http_page_cursor(crier_http_request *r, crier_json_buf *b, const char *name,
                            const PGresult *res, int row, int first, int n,
                            const char *const *scope, int n_scope);

#endif
