/* fanout_rows.c — a fan-out batch's COPY rows, built before their ids exist
 * (see fanout_rows.h). */
#include "fanout_rows.h"
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

/* ---- the set of keys ----------------------------------------------------- */

static void key_set_alloc(crier_key_set *s, size_t cap)
{
    free(s->slots);
    free(s->used);
    s->slots = crier_xmalloc(cap * sizeof *s->slots);
    s->used = crier_xcalloc(cap, sizeof *s->used);
    s->cap = cap;
    s->count = 0;
}

/* The slot that holds h, or the empty one where it goes (the set has room). */
static size_t key_set_probe(const crier_key_set *s, const uint8_t h[CRIER_KEY_HASH_LEN])
{
    uint64_t v;
    memcpy(&v, h, sizeof v);
    size_t i = v & (s->cap - 1);
    while (s->used[i] && memcmp(s->slots[i], h, CRIER_KEY_HASH_LEN) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static void key_set_put(crier_key_set *s, size_t i, const uint8_t h[CRIER_KEY_HASH_LEN])
{
    s->used[i] = true;
    memcpy(s->slots[i], h, CRIER_KEY_HASH_LEN);
    s->count++;
}

void crier_key_set_reset(crier_key_set *s, size_t n)
{
    size_t cap = s->cap ? s->cap : 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    if (cap != s->cap) {
        key_set_alloc(s, cap);
        return;
    }
    memset(s->used, 0, s->cap * sizeof *s->used);
    s->count = 0;
}

bool crier_key_set_insert(crier_key_set *s, const uint8_t h[CRIER_KEY_HASH_LEN])
{
    if (2 * (s->count + 1) > s->cap) { /* a load factor of at most 1/2: twice the room */
        crier_key_set old = *s;
        s->slots = NULL;
        s->used = NULL;
        key_set_alloc(s, old.cap ? 2 * old.cap : 16);
        for (size_t i = 0; i < old.cap; i++)
            if (old.used[i])
                key_set_put(s, key_set_probe(s, old.slots[i]), old.slots[i]);
        free(old.slots);
        free(old.used);
    }
    size_t i = key_set_probe(s, h);
    if (s->used[i])
        return false;
    key_set_put(s, i, h);
    return true;
}

void crier_key_set_free(crier_key_set *s)
{
    free(s->slots);
    free(s->used);
    memset(s, 0, sizeof *s);
}

/* ---- the rows ------------------------------------------------------------ */

void crier_fanout_rows_reset(crier_fanout_rows *r)
{
    crier_pg_copy_reset(&r->notifications);
    crier_pg_copy_reset(&r->deliveries);
    crier_key_set_reset(&r->seen, 0);
    r->kept = 0;
    r->n_ids = 0;
}

static void rows_id_field(crier_fanout_rows *r, bool deliveries, size_t off)
{
    if (r->n_ids == r->cap_ids) {
        r->cap_ids = r->cap_ids ? 2 * r->cap_ids : 1024;
        r->ids = crier_xrealloc(r->ids, r->cap_ids * sizeof *r->ids);
    }
    r->ids[r->n_ids++] = (crier_fanout_id_field){.off = off, .k = r->kept, .deliveries = deliveries};
}

bool crier_fanout_rows_add(crier_fanout_rows *r, const crier_key_parts *kp, int64_t event_id,
                           const char *emitted_at, const char *rules_version, const crier_plan *plan,
                           const crier_plan_recipient *pr)
{
    uint8_t h[CRIER_KEY_HASH_LEN];
    char key[2048], message_id[CRIER_KEY_ID_LEN + 1];
    crier_key_hash(kp, h);
    if (!crier_key_set_insert(&r->seen, h))
        return false; /* the same notification twice in one batch: the first is kept */
    size_t klen = crier_key_readable(kp, key, sizeof key);
    if (klen >= sizeof key)
        klen = sizeof key - 1;
    crier_key_hash_id(h, message_id);

    crier_pg_copy *n = &r->notifications, *d = &r->deliveries;
    rows_id_field(r, false, crier_pg_copy_int64_slot(n));
    crier_pg_copy_uuid(n, h);
    crier_pg_copy_text(n, key, klen);
    crier_pg_copy_int64(n, event_id);
    crier_pg_copy_str(n, kp->tenant);
    crier_pg_copy_str(n, kp->event_type);
    crier_pg_copy_str(n, kp->entity_id);
    crier_pg_copy_str(n, kp->recipient_id);
    crier_pg_copy_str(n, kp->discriminator);
    crier_pg_copy_str(n, rules_version);
    crier_pg_copy_end_row(n);
    for (size_t i = pr->first_delivery; i < pr->first_delivery + pr->n_deliveries; i++) {
        const crier_plan_delivery *pd = &plan->deliveries[i];
        rows_id_field(r, true, crier_pg_copy_int64_slot(d));
        crier_pg_copy_str(d, kp->tenant);
        crier_pg_copy_str(d, pd->channel);
        crier_pg_copy_text(d, message_id, CRIER_KEY_ID_LEN);
        crier_pg_copy_str(d, pd->target);
        crier_pg_copy_text(d, pd->body, pd->body_len);
        crier_pg_copy_str(d, pd->secret);
        crier_pg_copy_str(d, pd->subject);
        crier_pg_copy_str(d, pd->html);
        crier_pg_copy_str(d, pd->sender);
        crier_pg_copy_str(d, pd->retry);
        crier_pg_copy_str(d, emitted_at);
        crier_pg_copy_end_row(d);
    }
    r->kept++;
    return true;
}

void crier_fanout_rows_set_ids(crier_fanout_rows *r, int64_t (*id_of)(void *ud, size_t k), void *ud)
{
    int64_t id = 0;
    size_t k = SIZE_MAX;
    for (size_t i = 0; i < r->n_ids; i++) {
        const crier_fanout_id_field *f = &r->ids[i];
        if (f->k != k) { /* a notification's fields come together: one lookup each */
            k = f->k;
            id = id_of(ud, k);
        }
        crier_pg_copy_set_int64(f->deliveries ? &r->deliveries : &r->notifications, f->off, id);
    }
}

void crier_fanout_rows_free(crier_fanout_rows *r)
{
    crier_pg_copy_free(&r->notifications);
    crier_pg_copy_free(&r->deliveries);
    crier_key_set_free(&r->seen);
    free(r->ids);
    memset(r, 0, sizeof *r);
}
