/* test_keys.c — notification keys and lock keys against fixed vectors (computed
 * independently with Python's hashlib from the encoding documented in keys.h),
 * and the readable key's escaping. */
#include "check.h"
#include "keys.h"

#include <inttypes.h>

static const char *uuid_of(const char *t, const char *e, const char *en, const char *r, const char *d)
{
    static char out[CRIER_KEY_UUID_LEN + 1];
    uint8_t h[CRIER_KEY_HASH_LEN];
    crier_key_parts p = {t, e, en, r, d};
    crier_key_hash(&p, h);
    crier_key_hash_uuid(h, out);
    return out;
}

static const char *readable(const char *e, const char *en, const char *r, const char *d)
{
    static char out[256];
    crier_key_parts p = {"acme", e, en, r, d};
    crier_key_readable(&p, out, sizeof out);
    return out;
}

int main(void)
{
    /* Fixed vectors: these must never change, or keys stop matching across versions. */
    CHECK_STR(uuid_of("acme", "invoice.created", "inv_1234", "alice", NULL), "45a96ae5-c059-8cab-2ac2-8303a7821ca2");
    CHECK_STR(uuid_of("acme", "invoice.created", "inv_1234", "alice", "2026-11"),
              "ee41267e-016d-c318-d2a5-8856a0321213");
    /* An empty discriminator is not the same as none. */
    CHECK_STR(uuid_of("acme", "invoice.created", "inv_1234", "alice", ""), "67008a3f-c245-25a8-d36c-a54abd7c0645");
    /* Delimiters inside ids cannot make two tuples collide. */
    CHECK_STR(uuid_of("acme", "a:b", "c", "d", NULL), "bb53ea0b-b21b-6930-7740-20756e25fd1f");
    CHECK_STR(uuid_of("acme", "a", "b:c", "d", NULL), "c260ed16-c23f-a0d5-878e-e17318669677");
    CHECK_STR(uuid_of("t", "\xc3\xbc\xe2\x82\xac", "x\\y", "z", NULL), "f7c2327d-b4f5-e348-2737-7da812c7a10b");
    /* Tenants are part of the key. */
    {
        char first[CRIER_KEY_UUID_LEN + 1];
        strcpy(first, uuid_of("acme", "invoice.created", "inv_1234", "alice", NULL));
        CHECK(strcmp(first, uuid_of("globex", "invoice.created", "inv_1234", "alice", NULL)) != 0);
    }

    CHECK(crier_key_lock("acme", "invoice.created", "inv_1234") == INT64_C(8908431053182470910));
    CHECK(crier_key_lock("globex", "invoice.created", "inv_1234") == INT64_C(2624665745839857864));
    CHECK(crier_key_lock("a", "b:c", "d") == INT64_C(-8390062098499313256));
    CHECK(crier_key_lock("a", "b", "c:d") != crier_key_lock("a", "b:c", "d"));

    /* The side-effect id is the hash in hex with a prefix. */
    {
        uint8_t h[CRIER_KEY_HASH_LEN];
        char id[CRIER_KEY_ID_LEN + 1];
        crier_key_parts p = {"acme", "invoice.created", "inv_1234", "alice", NULL};
        crier_key_hash(&p, h);
        crier_key_hash_id(h, id);
        CHECK_STR(id, "msg_45a96ae5c0598cab2ac28303a7821ca2");
    }

    /* Readable keys escape ':' and '\' so different tuples print differently. */
    CHECK_STR(readable("invoice.created", "inv_1", "alice", NULL), "invoice.created:inv_1:alice");
    CHECK_STR(readable("invoice.created", "inv_1", "alice", "2026-11"), "invoice.created:inv_1:alice:2026-11");
    CHECK_STR(readable("a:b", "c", "d", NULL), "a\\:b:c:d");
    CHECK_STR(readable("a", "b:c", "d", NULL), "a:b\\:c:d");
    CHECK_STR(readable("a", "b\\", "c", NULL), "a:b\\\\:c");
    {
        char small[8];
        crier_key_parts p = {"acme", "invoice.created", "inv_1", "alice", NULL};
        size_t need = crier_key_readable(&p, small, sizeof small);
        CHECK(need == strlen("invoice.created:inv_1:alice"));
        CHECK(strlen(small) == sizeof small - 1);
    }
    return CHECK_DONE();
}
