/* http_head.c — head cursors and the snapshots that bound them (see
 * http_head.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_head.h"

#include "http_auth.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static bool snap_number(const char **p, unsigned long long *out)
{
    const char *s = *p;
    unsigned long long v = 0;
    if (!isdigit((unsigned char)*s))
        return false;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > (~0ULL - 9) / 10)
            return false;
        v = v * 10 + (unsigned long long)(*s - '0');
    }
    *p = s;
    *out = v;
    return true;
}

bool crier_http_snapshot_valid(const char *text)
{
    const char *p = text;
    unsigned long long xmin, xmax, prev, x;
    if (strlen(text) > CRIER_HTTP_SNAPSHOT_MAX)
        return false;
    if (!snap_number(&p, &xmin) || *p++ != ':' || !snap_number(&p, &xmax) || *p++ != ':' ||
        xmin > xmax || xmin == 0)
        return false;
    prev = 0;
    while (*p) {
        if (!snap_number(&p, &x) || x < xmin || x >= xmax || x <= prev)
            return false;
        prev = x;
        if (*p == ',')
            p++;
        else if (*p)
            return false;
    }
    return p[-1] != ',';
}

char *crier_http_head_sign(const unsigned char *secret, size_t secret_len, const char *user,
                           int64_t upto, const char *snapshot, const char *since)
{
    const char *scope[] = {"feed-head", user};
    char text[sizeof(((crier_http_head *)0)->text)];
    if ((snapshot && strlen(snapshot) > CRIER_HTTP_SNAPSHOT_MAX) ||
        (since && strlen(since) > CRIER_HTTP_SNAPSHOT_MAX))
        return NULL;
    if (snapshot)
        snprintf(text, sizeof text, "%s%s%s", snapshot, since ? " " : "", since ? since : "");
    return crier_http_cursor_sign(secret, secret_len, scope, 2, &upto, 1, snapshot ? text : NULL);
}

int crier_http_head_decode(crier_http_request *r, const char *cursor, const char *user,
                           crier_http_head *out)
{
    const char *scope[] = {"feed-head", user};
    char *space;
    memset(out, 0, sizeof *out);
    if (crier_http_cursor_decode_text(r, cursor, scope, 2, &out->upto, 1, out->text,
                                      sizeof out->text) < 0)
        return -1;
    if (!out->text[0])
        return 0; /* a cursor of the position only */
    out->snapshot = out->text;
    if ((space = strchr(out->text, ' '))) {
        *space = '\0';
        out->since = space + 1;
    }
    if (!crier_http_snapshot_valid(out->snapshot) ||
        (out->since && !crier_http_snapshot_valid(out->since)))
        return crier_http_error(r, 400, "invalid_cursor", "the cursor is not valid");
    return 0;
}
