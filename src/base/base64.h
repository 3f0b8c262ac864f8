/* base64.h — standard base64 (RFC 4648 alphabet with '+' and '/': email
 * encoded words, webhook signatures, "whsec_" secrets) and base64url without
 * padding (the HTTP API's keys, user tokens and cursors).
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: nothing of crier's.
 */
#ifndef CRIER_BASE64_H
#define CRIER_BASE64_H

#include <stddef.h>

/* Bytes crier_base64_encode writes for len input bytes, NUL included. */
#define CRIER_BASE64_ENCODED_SIZE(len) (4 * (((len) + 2) / 3) + 1)

/* Encodes in[0..len) with '=' padding into out, which must hold
 * CRIER_BASE64_ENCODED_SIZE(len) bytes; NUL-terminates it. Returns the length
 * written (without the NUL). */
size_t crier_base64_encode(const unsigned char *in, size_t len, char *out);

/* Decodes in[0..len) (padding optional, no whitespace) into out, which must
 * hold at least 3 * (len + 3) / 4 bytes. Returns the decoded length, or -1 on a
 * character outside the alphabet, misplaced padding or a dangling digit. */
long crier_base64_decode(const char *in, size_t len, unsigned char *out);

/* Characters base64url (no padding) needs for len bytes, without the NUL. */
#define CRIER_BASE64URL_LEN(len) (((len)*4 + 2) / 3)

/* Encodes in[0..len) as base64url without padding into out (at least
 * CRIER_BASE64URL_LEN(len) + 1 bytes); returns the length written. */
size_t crier_base64url_encode(const unsigned char *in, size_t len, char *out);

/* Decodes base64url (no padding, no other characters) into out, which holds
 * out_cap bytes. Returns the decoded length, or -1 when malformed or too long. */
long crier_base64url_decode(const char *in, size_t len, unsigned char *out, size_t out_cap);

#endif
