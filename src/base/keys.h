/* keys.h — deterministic notification keys and advisory-lock hashes.
 *
 * A notification is identified by (tenant, event type, entity id, recipient id,
 * optional discriminator). Three forms of that identity are computed here, all
 * identical across processes, machines and restarts (no clocks, no random
 * values, no per-process seeds):
 *   - the readable key "event_type:entity_id:recipient_id[:discriminator]", with
 *     '\' and ':' inside components escaped as "\\" and "\:" so that delimiters in
 *     ids can never make two different notifications print the same key;
 *   - the key hash: the first 128 bits of SHA-256 over a length-prefixed encoding
 *     of all five components (tenant included, so tenants never collide), stored
 *     as a uuid and enforced unique by the database; its text form prefixed with
 *     "msg_" is the id carried by side effects (webhook-id, Message-ID, …);
 *   - the lock key: a signed 64-bit integer from SHA-256 of the event's natural
 *     key (tenant, event type, entity id), for pg_try_advisory_xact_lock(bigint).
 * The fan-out stores what these functions compute (message ids included). The
 * other computations of the same facts, crier.testing.key in Lua and the
 * message id in SQL (crier.api_notification), are pinned to this code by the
 * shared vectors of tests/vectors/notification_keys.tsv.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: alloc.
 */
#ifndef CRIER_KEYS_H
#define CRIER_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define CRIER_KEY_HASH_LEN 16
#define CRIER_KEY_UUID_LEN 36   /* 8-4-4-4-12 hex, without NUL */
#define CRIER_KEY_ID_LEN 36     /* "msg_" + 32 hex, without NUL */

typedef struct {
    const char *tenant;
    const char *event_type;
    const char *entity_id;
    const char *recipient_id;
    const char *discriminator; /* NULL when absent (distinct from "") */
} crier_key_parts;

/* Computes the 128-bit key hash of parts into out. */
void crier_key_hash(const crier_key_parts *parts, uint8_t out[CRIER_KEY_HASH_LEN]);

/* Formats a key hash as a uuid string (lower-case hex) into out (>= 37 bytes). */
void crier_key_hash_uuid(const uint8_t hash[CRIER_KEY_HASH_LEN], char *out);

/* Formats a key hash as the side-effect id "msg_<32 hex>" into out (>= 37 bytes). */
void crier_key_hash_id(const uint8_t hash[CRIER_KEY_HASH_LEN], char *out);

/* Writes the readable key of parts into out (NUL-terminated). Returns the length
 * the full key needs (excluding NUL), like snprintf: a result >= out_len means out
 * was too small and holds a truncated key. */
size_t crier_key_readable(const crier_key_parts *parts, char *out, size_t out_len);

/* Returns the advisory-lock key of an event's natural key. */
int64_t crier_key_lock(const char *tenant, const char *event_type, const char *entity_id);

#endif
