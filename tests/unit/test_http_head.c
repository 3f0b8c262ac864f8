/* test_http_head.c — head cursors (http_head.h): what a first page and a live
 * feed hand out for "mark all read up to here" decodes to the position and
 * snapshots it was signed with, for its person and tenant only; a cursor of
 * the position alone (made before snapshots were signed in) still decodes;
 * anything altered, borrowed or malformed is 400 invalid_cursor; and the
 * snapshot syntax the stream's ids and the cursors share. */
#include "check.h"
#include "http_auth.h"
#include "http_head.h"

#include <stdlib.h>
#include <string.h>

static crier_http_request request(const char *secret)
{
    crier_http_request r;
    memset(&r, 0, sizeof r);
    r.secret_len = strlen(secret);
    memcpy(r.secret, secret, r.secret_len);
    return r;
}

/* Decodes cursor as user's head cursor in r; returns the status set (0: ok). */
static unsigned decode(crier_http_request *r, const char *cursor, const char *user,
                       crier_http_head *out)
{
    r->status = 0;
    return crier_http_head_decode(r, cursor, user, out) < 0 ? r->status : 0;
}

int main(void)
{
    crier_http_request r = request("tenant secret one"), other = request("tenant secret two");
    crier_http_head *h = calloc(1, sizeof *h);
    const unsigned char *secret = r.secret;
    CHECK(h);

    /* a live feed's item: position, the update's snapshot and the one before */
    char *c = crier_http_head_sign(secret, r.secret_len, "ann", 42, "100:105:101,103", "90:99:95");
    CHECK(c && !strchr(c, '=') && !strchr(c, '+') && !strchr(c, '/'));
    CHECK(decode(&r, c, "ann", h) == 0);
    CHECK(h->upto == 42);
    CHECK_STR(h->snapshot, "100:105:101,103");
    CHECK_STR(h->since, "90:99:95");
    CHECK(decode(&r, c, "bob", h) == 400);     /* another person's */
    CHECK(decode(&other, c, "ann", h) == 400); /* another tenant's */
    CHECK(strstr(r.response.data, "invalid_cursor") != NULL);
    for (size_t i = 0; c[i]; i++) { /* every character changed is refused */
        char saved = c[i];
        c[i] = c[i] == 'A' ? 'B' : 'A';
        CHECK(decode(&r, c, "ann", h) == 400);
        c[i] = saved;
    }
    free(c);

    /* a first page: position and the page's snapshot */
    c = crier_http_head_sign(secret, r.secret_len, "ann", 7, "100:100:", NULL);
    CHECK(decode(&r, c, "ann", h) == 0);
    CHECK(h->upto == 7);
    CHECK_STR(h->snapshot, "100:100:");
    CHECK(h->since == NULL);
    /* …is not a next-page cursor, whose decoding takes no text */
    const char *scope[] = {"feed-head", "ann"};
    int64_t pos = 0;
    CHECK(crier_http_cursor_decode(&r, c, scope, 2, &pos, 1) < 0);
    free(c);

    /* a head cursor of the position alone (before snapshots were signed in) */
    char legacy[128];
    int64_t nine = 9;
    crier_http_cursor_encode(&r, scope, 2, &nine, 1, legacy, sizeof legacy);
    CHECK(decode(&r, legacy, "ann", h) == 0);
    CHECK(h->upto == 9 && h->snapshot == NULL && h->since == NULL);

    /* a signed text that is not a snapshot is refused all the same */
    c = crier_http_cursor_sign(secret, r.secret_len, scope, 2, &nine, 1, "DROP TABLE x");
    CHECK(decode(&r, c, "ann", h) == 400);
    free(c);

    /* no cursor for a snapshot too long to carry */
    char *big = malloc(CRIER_HTTP_SNAPSHOT_MAX + 16);
    CHECK(big);
    memset(big, '1', CRIER_HTTP_SNAPSHOT_MAX + 8);
    big[CRIER_HTTP_SNAPSHOT_MAX + 8] = '\0';
    CHECK(crier_http_head_sign(secret, r.secret_len, "ann", 1, big, NULL) == NULL);
    CHECK(!crier_http_snapshot_valid(big));
    free(big);

    /* snapshots: xmin:xmax:xip-list, 0 < xmin <= xip < xmax, ascending */
    CHECK(crier_http_snapshot_valid("10:20:"));
    CHECK(crier_http_snapshot_valid("10:20:10,15,19"));
    CHECK(crier_http_snapshot_valid("10:10:"));
    CHECK(!crier_http_snapshot_valid("5:3:"));
    CHECK(!crier_http_snapshot_valid("0:1:"));
    CHECK(!crier_http_snapshot_valid("10:20:15,12"));
    CHECK(!crier_http_snapshot_valid("10:20:15,"));
    CHECK(!crier_http_snapshot_valid("10:20:20"));
    CHECK(!crier_http_snapshot_valid("10:20"));
    CHECK(!crier_http_snapshot_valid("abc"));
    CHECK(!crier_http_snapshot_valid("10:20: 15"));

    crier_json_buf_free(&r.response);
    crier_json_buf_free(&other.response);
    free(h);
    return CHECK_DONE();
}
