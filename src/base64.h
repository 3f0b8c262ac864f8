/* base64.h — standard base64 (RFC 4648 alphabet with '+' and '/'): the
 * encoder of email encoded words and webhook signatures, the decoder of
 * "whsec_" signing secrets. */
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

#endif
