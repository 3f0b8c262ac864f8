/* test_fanout_rows.c — a batch's COPY rows built before their ids exist
 * (src/engine/fanout_rows.c): every id field gets its notification's id, a
 * key planned twice is kept once (the first), and the key set grows past its
 * first size without losing keys; each delivery row carries its event's
 * commit time. */
#include "check.h"
#include "fanout_rows.h"

#include <stdint.h>
#include <stdlib.h>

/* the event's commit time, as crier.claim_events gives it */
#define T0 "2026-12-06T05:00:00.123456Z"

static int64_t id_of(void *ud, size_t k)
{
    (void)ud;
    return 1000 + (int64_t)k * 7; /* not consecutive, as concurrent batches make them */
}

int main(void)
{
    crier_fanout_rows r = {0};
    crier_plan_delivery dl[2] = {
        {.channel = "webhook", .target = "http://h/x", .body = "{\"a\":\"t\\tb\"}", .body_len = 12},
        {.channel = "email", .target = "u@x.test", .body = "line1\nline2", .body_len = 11, .subject = "S"},
    };
    crier_plan plan = {.deliveries = dl, .n_deliveries = 2};
    crier_plan_recipient pr = {.slot = 0, .recipient = "u1", .first_delivery = 0, .n_deliveries = 2};
    crier_key_parts kp = {.tenant = "acme", .event_type = "memo", .entity_id = "m1", .recipient_id = "u1"};

    crier_fanout_rows_reset(&r);
    CHECK(crier_fanout_rows_add(&r, &kp, 42, T0, "v1", &plan, &pr));
    CHECK(!crier_fanout_rows_add(&r, &kp, 43, T0, "v1", &plan, &pr)); /* the same key: left out */
    crier_key_parts kp2 = kp;
    kp2.recipient_id = "u2";
    crier_plan_recipient pr2 = pr;
    pr2.recipient = "u2";
    pr2.n_deliveries = 1;
    CHECK(crier_fanout_rows_add(&r, &kp2, 42, T0, "v1", &plan, &pr2));
    CHECK(r.kept == 2);
    CHECK(r.notifications.rows == 2);
    CHECK(r.deliveries.rows == 3);
    crier_fanout_rows_set_ids(&r, id_of, NULL);

    /* each row starts with its notification's id, zero-padded */
    char *n = strndup(r.notifications.data, r.notifications.len);
    char *d = strndup(r.deliveries.data, r.deliveries.len);
    CHECK(strncmp(n, "0000000000000001000\t", 20) == 0);
    CHECK(strstr(n, "\n0000000000000001007\t") != NULL);
    CHECK(strstr(n, "\tmemo:m1:u1\t42\tacme\tmemo\tm1\tu1\t\\N\tv1\n") != NULL);
    CHECK(strstr(n, "\tmemo:m1:u2\t42\tacme\tmemo\tm1\tu2\t\\N\tv1\n") != NULL);
    CHECK(strncmp(d, "0000000000000001000\tacme\twebhook\tmsg_", 37) == 0);
    CHECK(strstr(d, "\n0000000000000001000\tacme\temail\tmsg_") != NULL);
    CHECK(strstr(d, "\n0000000000000001007\tacme\twebhook\tmsg_") != NULL);
    CHECK(strstr(d, "{\"a\":\"t\\\\tb\"}") != NULL); /* the body's backslash, escaped */
    CHECK(strstr(d, "line1\\nline2") != NULL);
    CHECK(strstr(d, "\t" T0 "\n") != NULL); /* each delivery ends with its event's time */
    free(n);
    free(d);

    /* a reset batch starts empty; its key set grows past its first size */
    crier_fanout_rows_reset(&r);
    CHECK(r.kept == 0 && r.notifications.len == 0 && r.n_ids == 0);
    char id[32];
    size_t added = 0;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 5000; i++) {
            snprintf(id, sizeof id, "r%d", i);
            kp.recipient_id = id;
            pr.recipient = id;
            pr.n_deliveries = 1;
            added += crier_fanout_rows_add(&r, &kp, 1, T0, "v1", &plan, &pr);
        }
    CHECK(added == 5000); /* the second round met every key */
    CHECK(r.kept == 5000 && r.seen.count == 5000 && r.seen.cap >= 10000);
    crier_fanout_rows_set_ids(&r, id_of, NULL);
    CHECK(r.n_ids == 10000);

    crier_fanout_rows_free(&r);
    return CHECK_DONE();
}
