/* test_pg_array.c — the batch encoder: PostgreSQL array literals for unnest(),
 * including quoting, escaping, NULLs, numbers and buffer reuse. */
#include "check.h"
#include "pg_array.h"

#include <stdint.h>

int main(void)
{
    crier_pg_array a = {0};

    crier_pg_array_begin(&a);
    CHECK_STR(crier_pg_array_end(&a), "{}");

    crier_pg_array_begin(&a);
    crier_pg_array_add_str(&a, "alice");
    crier_pg_array_add_str(&a, NULL);
    crier_pg_array_add_str(&a, "NULL");
    crier_pg_array_add_str(&a, "");
    crier_pg_array_add_str(&a, "a \"quoted\" \\ back, {brace}");
    CHECK_STR(crier_pg_array_end(&a), "{\"alice\",NULL,\"NULL\",\"\",\"a \\\"quoted\\\" \\\\ back, {brace}\"}");
    CHECK(a.count == 5);

    crier_pg_array_begin(&a);
    crier_pg_array_add_int64(&a, 1);
    crier_pg_array_add_int64(&a, INT64_MIN);
    crier_pg_array_add_null(&a);
    crier_pg_array_add_double(&a, 0.5);
    CHECK_STR(crier_pg_array_end(&a), "{1,-9223372036854775808,NULL,0.5}");

    /* Explicit length: embedded data after the length is not read. */
    crier_pg_array_begin(&a);
    crier_pg_array_add_text(&a, "abcdef", 3);
    CHECK_STR(crier_pg_array_end(&a), "{\"abc\"}");

    /* Growth across many elements keeps every element. */
    crier_pg_array_begin(&a);
    for (int i = 0; i < 10000; i++)
        crier_pg_array_add_str(&a, "x\"y");
    const char *big = crier_pg_array_end(&a);
    CHECK(strlen(big) == 2 + 10000 * 6 + 9999);
    CHECK(big[0] == '{' && big[strlen(big) - 1] == '}');

    crier_pg_array_free(&a);
    CHECK(a.data == NULL);
    return CHECK_DONE();
}
