/* keys.c — deterministic notification keys and advisory-lock hashes (see keys.h). */
#include "keys.h"
#include "alloc.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* Returns this thread's reusable SHA-256 context, initialised for a new digest.
 * SHA-256 is fetched from the provider once per thread: EVP_sha256() in
 * EVP_DigestInit_ex fetches it again on every digest under OpenSSL 3, with a
 * lock round trip, and that was 60% of the time a key took (perf, crier
 * serve fanning out). Allocation failure is fatal: keys cannot be computed
 * without it. */
static EVP_MD_CTX *key_digest_begin(void)
{
    static __thread EVP_MD_CTX *ctx;
    static __thread EVP_MD *sha256;

    if (!ctx) {
        ctx = EVP_MD_CTX_new();
        sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
        if (!ctx || !sha256)
            crier_out_of_memory("the SHA-256 context of notification keys");
    }
    if (EVP_DigestInit_ex(ctx, sha256, NULL) != 1)
        abort();
    return ctx;
}

/* Feeds one component into the hash as a 1-byte presence tag, a 4-byte
 * big-endian length and the bytes, so that no choice of component contents can
 * make two different tuples produce the same input. */
static void key_feed(EVP_MD_CTX *ctx, const char *s)
{
    uint8_t head[5];
    size_t n;

    if (!s) {
        head[0] = 0;
        EVP_DigestUpdate(ctx, head, 1);
        return;
    }
    n = strlen(s);
    head[0] = 1;
    head[1] = (uint8_t)(n >> 24);
    head[2] = (uint8_t)(n >> 16);
    head[3] = (uint8_t)(n >> 8);
    head[4] = (uint8_t)n;
    EVP_DigestUpdate(ctx, head, sizeof head);
    EVP_DigestUpdate(ctx, s, n);
}

void crier_key_hash(const crier_key_parts *p, uint8_t out[CRIER_KEY_HASH_LEN])
{
    static const char domain[] = "crier.notification.v1";
    uint8_t digest[EVP_MAX_MD_SIZE];
    EVP_MD_CTX *ctx = key_digest_begin();

    EVP_DigestUpdate(ctx, domain, sizeof domain - 1);
    key_feed(ctx, p->tenant);
    key_feed(ctx, p->event_type);
    key_feed(ctx, p->entity_id);
    key_feed(ctx, p->recipient_id);
    key_feed(ctx, p->discriminator);
    EVP_DigestFinal_ex(ctx, digest, NULL);
    memcpy(out, digest, CRIER_KEY_HASH_LEN);
}

static const char hex_digits[] = "0123456789abcdef";

void crier_key_hash_uuid(const uint8_t h[CRIER_KEY_HASH_LEN], char *out)
{
    char *o = out;
    for (int i = 0; i < CRIER_KEY_HASH_LEN; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex_digits[h[i] >> 4];
        *o++ = hex_digits[h[i] & 15];
    }
    *o = '\0';
}

void crier_key_hash_id(const uint8_t h[CRIER_KEY_HASH_LEN], char *out)
{
    char *o = out;
    memcpy(o, "msg_", 4);
    o += 4;
    for (int i = 0; i < CRIER_KEY_HASH_LEN; i++) {
        *o++ = hex_digits[h[i] >> 4];
        *o++ = hex_digits[h[i] & 15];
    }
    *o = '\0';
}

/* Appends s with '\' and ':' escaped; returns the new total length. */
static size_t key_append_escaped(char *out, size_t out_len, size_t pos, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == ':') {
            if (pos + 1 < out_len)
                out[pos] = '\\';
            pos++;
        }
        if (pos + 1 < out_len)
            out[pos] = *s;
        pos++;
    }
    return pos;
}

size_t crier_key_readable(const crier_key_parts *p, char *out, size_t out_len)
{
    const char *parts[4] = {p->event_type, p->entity_id, p->recipient_id, p->discriminator};
    int n = p->discriminator ? 4 : 3;
    size_t pos = 0;

    for (int i = 0; i < n; i++) {
        if (i > 0) {
            if (pos + 1 < out_len)
                out[pos] = ':';
            pos++;
        }
        pos = key_append_escaped(out, out_len, pos, parts[i] ? parts[i] : "");
    }
    if (out_len > 0)
        out[pos < out_len ? pos : out_len - 1] = '\0';
    return pos;
}

int64_t crier_key_lock(const char *tenant, const char *event_type, const char *entity_id)
{
    static const char domain[] = "crier.event.v1";
    uint8_t digest[EVP_MAX_MD_SIZE];
    EVP_MD_CTX *ctx = key_digest_begin();
    uint64_t v = 0;

    EVP_DigestUpdate(ctx, domain, sizeof domain - 1);
    key_feed(ctx, tenant);
    key_feed(ctx, event_type);
    key_feed(ctx, entity_id);
    EVP_DigestFinal_ex(ctx, digest, NULL);
    for (int i = 0; i < 8; i++)
        v = (v << 8) | digest[i];
    return (int64_t)v;
}
