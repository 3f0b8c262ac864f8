/* test_pg_copy.c — rows in COPY's text format: the four escaped bytes
 * (backslash, newline, carriage return, tab) anywhere in a value, NULL as
 * \N, fields joined by tabs and rows ended by newlines, integers and uuids.
 * (tests/integration/fanout_copy.sh checks that PostgreSQL reads such rows
 * back as the statement path writes them.) */
#include "check.h"
#include "pg_copy.h"

#include <stdint.h>
#include <stdlib.h>

/* The buffer's bytes as a C string (the rows hold no NUL). */
static const char *text_of(crier_pg_copy *c)
{
    static char out[4096];
    memcpy(out, c->data, c->len);
    out[c->len] = '\0';
    return out;
}

int main(void)
{
    crier_pg_copy c = {0};

    crier_pg_copy_str(&c, "plain");
    crier_pg_copy_str(&c, NULL);
    crier_pg_copy_text(&c, "a\tb\nc\rd\\e", 9);
    crier_pg_copy_str(&c, "");
    crier_pg_copy_end_row(&c);
    CHECK_STR(text_of(&c), "plain\t\\N\ta\\tb\\nc\\rd\\\\e\t\n");
    CHECK(c.rows == 1);

    crier_pg_copy_reset(&c);
    CHECK(c.len == 0 && c.rows == 0);
    /* escapes at the edges, runs of them, and only them */
    crier_pg_copy_str(&c, "\\start");
    crier_pg_copy_str(&c, "end\t");
    crier_pg_copy_str(&c, "\n\n\r\r\t\t\\\\");
    crier_pg_copy_text(&c, "cut\there", 3); /* only n bytes */
    crier_pg_copy_end_row(&c);
    CHECK_STR(text_of(&c), "\\\\start\tend\\t\t\\n\\n\\r\\r\\t\\t\\\\\\\\\tcut\n");

    crier_pg_copy_reset(&c);
    crier_pg_copy_int64(&c, 0);
    crier_pg_copy_int64(&c, -42);
    crier_pg_copy_int64(&c, INT64_MAX);
    crier_pg_copy_int64(&c, INT64_MIN);
    static const uint8_t uuid[16] = {0x63, 0x3c, 0xa2, 0xb5, 0x0a, 0x6d, 0x80, 0xe6,
                                     0xe6, 0xc1, 0x7a, 0x24, 0x32, 0x35, 0x93, 0x62};
    crier_pg_copy_uuid(&c, uuid);
    crier_pg_copy_end_row(&c);
    crier_pg_copy_str(&c, "second");
    crier_pg_copy_end_row(&c);
    CHECK_STR(text_of(&c), "0\t-42\t9223372036854775807\t-9223372036854775808\t"
                           "633ca2b5-0a6d-80e6-e6c1-7a2432359362\nsecond\n");
    CHECK(c.rows == 2);

    /* a long value with an escape every few bytes, and one with none */
    crier_pg_copy_reset(&c);
    char big[1000], want[2000];
    size_t w = 0;
    for (int i = 0; i < 999; i++) {
        big[i] = i % 7 == 3 ? '\t' : (char)('a' + i % 26);
        if (big[i] == '\t') {
            want[w++] = '\\';
            want[w++] = 't';
        } else {
            want[w++] = big[i];
        }
    }
    big[999] = '\0';
    want[w] = '\0';
    crier_pg_copy_str(&c, big);
    CHECK_STR(text_of(&c), want);

    /* an integer written in later: zeros now, the value (zero-padded) then */
    crier_pg_copy_reset(&c);
    crier_pg_copy_str(&c, "x");
    size_t a = crier_pg_copy_int64_slot(&c);
    size_t b = crier_pg_copy_int64_slot(&c);
    crier_pg_copy_end_row(&c);
    CHECK_STR(text_of(&c), "x\t0000000000000000000\t0000000000000000000\n");
    crier_pg_copy_set_int64(&c, a, 123);
    crier_pg_copy_set_int64(&c, b, INT64_MAX);
    CHECK_STR(text_of(&c), "x\t0000000000000000123\t9223372036854775807\n");

    crier_pg_copy_free(&c);
    CHECK(c.data == NULL);
    return CHECK_DONE();
}
