/* test_pg_array.c — the batch encoder: PostgreSQL binary arrays (header,
 * element encodings, NULLs, empty arrays, buffer reuse) and parameter sets.
 * The integration tests send these arrays to a real server. */
#include "check.h"
#include "pg_array.h"

#include <stdint.h>

/* Reads a big-endian 32-bit integer. */
static uint32_t be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

int main(void)
{
    crier_pg_array a = {0};
    crier_pg_params params;
    const char *d;

    /* Empty: no dimensions, just ndim 0, flags 0 and the element type. */
    crier_pg_array_begin(&a, CRIER_PG_TEXT);
    d = crier_pg_array_end(&a);
    CHECK(a.len == 12);
    CHECK(be32(d) == 0 && be32(d + 4) == 0 && be32(d + 8) == CRIER_PG_TEXT);

    /* Text with a NULL: header, then length-prefixed raw bytes (no escaping). */
    crier_pg_array_begin(&a, CRIER_PG_TEXT);
    crier_pg_array_add_str(&a, "a\"b\\c");
    crier_pg_array_add_str(&a, NULL);
    crier_pg_array_add_text(&a, "abcdef", 3);
    d = crier_pg_array_end(&a);
    CHECK(a.count == 3);
    CHECK(be32(d) == 1);                 /* one dimension */
    CHECK(be32(d + 4) == 1);             /* has NULLs */
    CHECK(be32(d + 8) == CRIER_PG_TEXT); /* element type */
    CHECK(be32(d + 12) == 3);            /* length of the dimension */
    CHECK(be32(d + 16) == 1);            /* lower bound */
    CHECK(be32(d + 20) == 5 && memcmp(d + 24, "a\"b\\c", 5) == 0);
    CHECK(be32(d + 29) == 0xffffffffu);
    CHECK(be32(d + 33) == 3 && memcmp(d + 37, "abc", 3) == 0);
    CHECK(a.len == 40);

    /* Fixed-width types, big-endian. */
    crier_pg_array_begin(&a, CRIER_PG_INT8);
    crier_pg_array_add_int64(&a, INT64_MIN);
    crier_pg_array_add_int64(&a, 258);
    d = crier_pg_array_end(&a);
    CHECK(be32(d + 4) == 0); /* no NULLs */
    CHECK(be32(d + 20) == 8 && (unsigned char)d[24] == 0x80 && d[25] == 0 && d[31] == 0);
    CHECK(be32(d + 32) == 8 && d[42] == 1 && d[43] == 2);

    crier_pg_array_begin(&a, CRIER_PG_INT4);
    crier_pg_array_add_int32(&a, -2);
    d = crier_pg_array_end(&a);
    CHECK(be32(d + 20) == 4 && be32(d + 24) == 0xfffffffeu);

    crier_pg_array_begin(&a, CRIER_PG_FLOAT8);
    crier_pg_array_add_double(&a, 1.0); /* 0x3ff0000000000000 */
    d = crier_pg_array_end(&a);
    CHECK(be32(d + 24) == 0x3ff00000u && be32(d + 28) == 0);

    crier_pg_array_begin(&a, CRIER_PG_BOOL);
    crier_pg_array_add_bool(&a, true);
    crier_pg_array_add_bool(&a, false);
    d = crier_pg_array_end(&a);
    CHECK(be32(d + 20) == 1 && d[24] == 1 && be32(d + 25) == 1 && d[29] == 0);

    {
        uint8_t u[16];
        for (int i = 0; i < 16; i++)
            u[i] = (uint8_t)(i * 17);
        crier_pg_array_begin(&a, CRIER_PG_UUID);
        crier_pg_array_add_uuid(&a, u);
        d = crier_pg_array_end(&a);
        CHECK(be32(d + 8) == CRIER_PG_UUID && be32(d + 20) == 16 && memcmp(d + 24, u, 16) == 0);
    }

    /* Growth across many elements keeps every element. */
    crier_pg_array_begin(&a, CRIER_PG_TEXT);
    for (int i = 0; i < 10000; i++)
        crier_pg_array_add_str(&a, "x\"y");
    d = crier_pg_array_end(&a);
    CHECK(be32(d + 12) == 10000);
    CHECK(a.len == 20 + 10000 * (4 + 3));
    CHECK(be32(d + 20 + 9999 * 7) == 3 && memcmp(d + 20 + 9999 * 7 + 4, "x\"y", 3) == 0);

    /* A parameter set: text beside binary. */
    crier_pg_params_reset(&params);
    crier_pg_params_text(&params, "500");
    crier_pg_array_begin(&a, CRIER_PG_INT8);
    crier_pg_array_add_int64(&a, 7);
    crier_pg_params_array(&params, &a);
    crier_pg_params_text(&params, NULL);
    CHECK(params.n == 3);
    CHECK(params.formats[0] == 0 && params.formats[1] == 1 && params.formats[2] == 0);
    CHECK(params.values[1] == a.data && params.lengths[1] == (int)a.len);
    CHECK(params.values[2] == NULL);

    crier_pg_array_free(&a);
    CHECK(a.data == NULL);
    return CHECK_DONE();
}
