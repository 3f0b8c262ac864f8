/* http_page.c — a list endpoint's page: items and signed cursors (see
 * http_page.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_page.h"

#include "http_auth.h"

#include <stdint.h>
#include <stdlib.h>

void crier_http_page_items(crier_json_buf *b, const PGresult *res, int limit)
{
    int n = PQntuples(res);
    crier_json_buf_puts(b, "{\"items\":[");
    for (int i = 0; i < n && i < limit; i++) {
        if (i)
            crier_json_buf_puts(b, ",");
        crier_json_buf_add(b, PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0));
    }
    crier_json_buf_puts(b, "]");
}

void crier_http_page_cursor(crier_http_request *r, crier_json_buf *b, const char *name,
                            const PGresult *res, int row, int first, int n,
                            const char *const *scope, int n_scope)
{
    int64_t pos[CRIER_CURSOR_MAX_VALUES];
    char text[160];
    crier_json_buf_printf(b, ",\"%s\":", name);
    if (row < 0 || n > CRIER_CURSOR_MAX_VALUES) {
        crier_json_buf_puts(b, "null");
        return;
    }
    for (int c = 0; c < n; c++)
        pos[c] = strtoll(PQgetvalue(res, row, first + c), NULL, 10);
    crier_http_cursor_encode(r, scope, n_scope, pos, n, text, sizeof text);
    crier_json_buf_string(b, text);
}
