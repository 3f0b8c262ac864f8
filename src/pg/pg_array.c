/* pg_array.c — PostgreSQL binary array encoder and statement parameter sets
 * (see pg_array.h).
 *
 * Binary array layout (array_send/array_recv), all integers big-endian:
 *   int32 ndim (1, or 0 when empty), int32 flags (1 if any NULL), uint32 element
 *   type OID, then per dimension int32 length and int32 lower bound (1), then
 *   per element int32 byte length (-1 for NULL) and the element's binary form. */
#include "pg_array.h"
#include "alloc.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Room kept at the front for the header, written by crier_pg_array_end. */
#define ARRAY_HEADER_LEN 20

static void array_reserve(crier_pg_array *a, size_t extra)
{
    size_t need = a->len + extra;
    if (need <= a->cap)
        return;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = crier_xrealloc(a->data, cap);
    a->data = p;
    a->cap = cap;
}

static void array_put_u32(char *o, uint32_t v)
{
    o[0] = (char)(v >> 24);
    o[1] = (char)(v >> 16);
    o[2] = (char)(v >> 8);
    o[3] = (char)v;
}

/* Appends one element: its length, then n bytes from s. */
static void array_element(crier_pg_array *a, const void *s, size_t n)
{
    array_reserve(a, 4 + n);
    array_put_u32(a->data + a->len, (uint32_t)n);
    memcpy(a->data + a->len + 4, s, n);
    a->len += 4 + n;
    a->count++;
}

/* Appends a fixed-width integer element of width bytes, big-endian. */
static void array_element_be(crier_pg_array *a, uint64_t v, size_t width)
{
    unsigned char b[8];
    for (size_t i = 0; i < width; i++)
        b[i] = (unsigned char)(v >> (8 * (width - 1 - i)));
    array_element(a, b, width);
}

void crier_pg_array_begin(crier_pg_array *a, uint32_t elem_oid)
{
    a->len = 0;
    a->count = 0;
    a->elem_oid = elem_oid;
    a->has_null = false;
    array_reserve(a, ARRAY_HEADER_LEN);
    a->len = ARRAY_HEADER_LEN;
}

void crier_pg_array_add_text(crier_pg_array *a, const char *s, size_t n)
{
    assert(a->elem_oid == CRIER_PG_TEXT);
    array_element(a, s, n);
}

void crier_pg_array_add_str(crier_pg_array *a, const char *s)
{
    if (s)
        crier_pg_array_add_text(a, s, strlen(s));
    else
        crier_pg_array_add_null(a);
}

void crier_pg_array_add_null(crier_pg_array *a)
{
    array_reserve(a, 4);
    array_put_u32(a->data + a->len, 0xffffffffu);
    a->len += 4;
    a->count++;
    a->has_null = true;
}

void crier_pg_array_add_int64(crier_pg_array *a, int64_t v)
{
    assert(a->elem_oid == CRIER_PG_INT8);
    array_element_be(a, (uint64_t)v, 8);
}

void crier_pg_array_add_int32(crier_pg_array *a, int32_t v)
{
    assert(a->elem_oid == CRIER_PG_INT4);
    array_element_be(a, (uint32_t)v, 4);
}

void crier_pg_array_add_double(crier_pg_array *a, double v)
{
    uint64_t bits;
    assert(a->elem_oid == CRIER_PG_FLOAT8);
    memcpy(&bits, &v, sizeof bits);
    array_element_be(a, bits, 8);
}

void crier_pg_array_add_bool(crier_pg_array *a, bool v)
{
    unsigned char b = v ? 1 : 0;
    assert(a->elem_oid == CRIER_PG_BOOL);
    array_element(a, &b, 1);
}

void crier_pg_array_add_uuid(crier_pg_array *a, const uint8_t bytes[16])
{
    assert(a->elem_oid == CRIER_PG_UUID);
    array_element(a, bytes, 16);
}

const char *crier_pg_array_end(crier_pg_array *a)
{
    char *h = a->data;
    if (a->count == 0) {
        /* An empty array has no dimensions. */
        array_put_u32(h, 0);
        array_put_u32(h + 4, 0);
        array_put_u32(h + 8, a->elem_oid);
        memmove(h + 12, h + ARRAY_HEADER_LEN, a->len - ARRAY_HEADER_LEN);
        a->len -= ARRAY_HEADER_LEN - 12;
        return a->data;
    }
    array_put_u32(h, 1);
    array_put_u32(h + 4, a->has_null ? 1 : 0);
    array_put_u32(h + 8, a->elem_oid);
    array_put_u32(h + 12, (uint32_t)a->count);
    array_put_u32(h + 16, 1);
    return a->data;
}

void crier_pg_array_free(crier_pg_array *a)
{
    free(a->data);
    memset(a, 0, sizeof *a);
}

void crier_pg_params_reset(crier_pg_params *p)
{
    p->n = 0;
}

void crier_pg_params_text(crier_pg_params *p, const char *value)
{
    assert(p->n < CRIER_PG_MAX_PARAMS);
    p->values[p->n] = value;
    p->lengths[p->n] = 0;
    p->formats[p->n] = 0;
    p->n++;
}

void crier_pg_params_array(crier_pg_params *p, crier_pg_array *a)
{
    assert(p->n < CRIER_PG_MAX_PARAMS);
    p->values[p->n] = crier_pg_array_end(a);
    p->lengths[p->n] = (int)a->len;
    p->formats[p->n] = 1;
    p->n++;
}
