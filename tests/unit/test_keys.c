/* test_keys.c — notification keys and lock keys against the shared vectors of
 * tests/vectors/notification_keys.tsv (the same rows pin crier.testing.key in
 * Lua and the message id in PostgreSQL), plus the properties no single row
 * shows: tenants are part of the key, and a short buffer truncates the
 * readable key like snprintf. */
#include "check.h"
#include "keys.h"

#include <inttypes.h>
#include <stdlib.h>

/* The vectors file's columns, in order (its first non-comment line names them). */
enum {
    VEC_TENANT,
    VEC_EVENT_TYPE,
    VEC_ENTITY_ID,
    VEC_RECIPIENT_ID,
    VEC_DISCRIMINATOR,
    VEC_KEY,
    VEC_KEY_HASH,
    VEC_MESSAGE_ID,
    VEC_LOCK_KEY,
    VEC_N_COLUMNS
};

static const char vec_header[] =
    "tenant\tevent_type\tentity_id\trecipient_id\tdiscriminator\tkey\tkey_hash\tmessage_id\tlock_key";

/* The file holds at least this many rows; fewer means it was cut short. */
#define VEC_MIN_ROWS 44

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes one field of COPY text format in place (the subset the file's header
 * allows: \N alone for NULL, \\ \t \n \r \xHH). Returns the field, NULL for \N,
 * or sets *bad on an escape outside the subset or a NUL byte. */
static char *vec_decode(char *s, int *bad)
{
    char *in = s, *out = s;

    if (strcmp(s, "\\N") == 0)
        return NULL;
    while (*in) {
        if (*in != '\\') {
            *out++ = *in++;
            continue;
        }
        in++;
        if (*in == 'x') {
            int hi = hex_value(in[1]), lo = hi < 0 ? -1 : hex_value(in[2]);
            if (lo < 0 || (hi << 4 | lo) == 0) {
                *bad = 1;
                return s;
            }
            *out++ = (char)(hi << 4 | lo);
            in += 3;
        } else {
            static const char names[] = "\\tnr", bytes[] = "\\\t\n\r";
            const char *at = *in ? strchr(names, *in) : NULL;
            if (!at) {
                *bad = 1;
                return s;
            }
            *out++ = bytes[at - names];
            in++;
        }
    }
    *out = '\0';
    return s;
}

/* Checks every computation of keys.h on one row (fields decoded, line is the
 * file's line number for messages). */
static void check_vector(char *const f[VEC_N_COLUMNS], int line)
{
    crier_key_parts p = {f[VEC_TENANT], f[VEC_EVENT_TYPE], f[VEC_ENTITY_ID], f[VEC_RECIPIENT_ID],
                         f[VEC_DISCRIMINATOR]};
    uint8_t h[CRIER_KEY_HASH_LEN];
    char uuid[CRIER_KEY_UUID_LEN + 1], id[CRIER_KEY_ID_LEN + 1], key[2048], lock[24];
    size_t need;
    int failures = check_failures;

    crier_key_hash(&p, h);
    crier_key_hash_uuid(h, uuid);
    crier_key_hash_id(h, id);
    need = crier_key_readable(&p, key, sizeof key);
    snprintf(lock, sizeof lock, "%" PRId64, crier_key_lock(p.tenant, p.event_type, p.entity_id));

    CHECK_STR(uuid, f[VEC_KEY_HASH]);
    CHECK_STR(id, f[VEC_MESSAGE_ID]);
    CHECK_STR(key, f[VEC_KEY]);
    CHECK(need == strlen(f[VEC_KEY]));
    CHECK_STR(lock, f[VEC_LOCK_KEY]);
    if (check_failures != failures)
        fprintf(stderr, "  (the row at notification_keys.tsv:%d)\n", line);
}

/* Runs check_vector over every row of the vectors file; returns the number of
 * rows, or -1 when the file cannot be read or is malformed. */
static int check_vector_file(const char *path)
{
    FILE *in = fopen(path, "r");
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    int line = 0, rows = -1; /* -1 until the header is seen */

    if (!in) {
        perror(path);
        return -1;
    }
    while ((len = getline(&buf, &cap, in)) >= 0) {
        char *f[VEC_N_COLUMNS], *s = buf;
        int n = 0, bad = 0;

        line++;
        if (len > 0 && buf[len - 1] == '\n')
            buf[--len] = '\0';
        if (buf[0] == '#')
            continue;
        if (rows < 0) {
            if (strcmp(buf, vec_header) != 0) {
                fprintf(stderr, "%s:%d: expected the header \"%s\"\n", path, line, vec_header);
                goto bad;
            }
            rows = 0;
            continue;
        }
        for (;;) {
            char *tab = strchr(s, '\t');
            if (n < VEC_N_COLUMNS)
                f[n] = s;
            n++;
            if (!tab)
                break;
            *tab = '\0';
            s = tab + 1;
        }
        if (n != VEC_N_COLUMNS) {
            fprintf(stderr, "%s:%d: expected %d tab-separated fields\n", path, line, VEC_N_COLUMNS);
            goto bad;
        }
        for (int i = 0; i < VEC_N_COLUMNS; i++)
            f[i] = vec_decode(f[i], &bad);
        for (int i = 0; i < VEC_N_COLUMNS; i++)
            if (!f[i] && i != VEC_DISCRIMINATOR)
                bad = 1;
        if (bad) {
            fprintf(stderr, "%s:%d: a field is NULL where it cannot be, or has an unknown escape\n",
                    path, line);
            goto bad;
        }
        check_vector(f, line);
        rows++;
    }
    free(buf);
    fclose(in);
    return rows;
bad:
    free(buf);
    fclose(in);
    return -1;
}

int main(void)
{
    const char *source = getenv("CRIER_SOURCE_DIR");
    char path[4096];
    int rows;

    if (!source) {
        fprintf(stderr, "run through ctest (CRIER_SOURCE_DIR unset)\n");
        return 1;
    }
    snprintf(path, sizeof path, "%s/tests/vectors/notification_keys.tsv", source);
    rows = check_vector_file(path);
    CHECK(rows >= VEC_MIN_ROWS);
    printf("%d vectors of %s\n", rows, path);

    /* Tenants are part of the key, and of the lock key. */
    {
        uint8_t a[CRIER_KEY_HASH_LEN], b[CRIER_KEY_HASH_LEN];
        crier_key_parts acme = {"acme", "invoice.created", "inv_1234", "alice", NULL};
        crier_key_parts globex = {"globex", "invoice.created", "inv_1234", "alice", NULL};
        crier_key_hash(&acme, a);
        crier_key_hash(&globex, b);
        CHECK(memcmp(a, b, sizeof a) != 0);
    }
    CHECK(crier_key_lock("a", "b", "c:d") != crier_key_lock("a", "b:c", "d"));

    /* A short buffer holds a truncated, terminated key; the result is the full length. */
    {
        char small[8];
        crier_key_parts p = {"acme", "invoice.created", "inv_1", "alice", NULL};
        size_t need = crier_key_readable(&p, small, sizeof small);
        CHECK(need == strlen("invoice.created:inv_1:alice"));
        CHECK(strlen(small) == sizeof small - 1);
    }
    return CHECK_DONE();
}
