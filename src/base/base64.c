/* base64.c — standard base64 (RFC 4648 §4) and base64url without padding
 * (§5): one encoder and one decoder serve both alphabets (see base64.h). */
#include "base64.h"

static const char base64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char base64url_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static size_t base64_encode_with(const unsigned char *in, size_t len, char *out, const char *alphabet, int pad)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i += 3) {
        unsigned long v = (unsigned long)in[i] << 16;

        if (i + 1 < len)
            v |= (unsigned long)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        if (i + 1 < len || pad)
            out[o++] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
        if (i + 2 < len || pad)
            out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

/* The value of one digit (c62 and c63 are the alphabet's last two), or -1. */
static int base64_value(unsigned char c, char c62, char c63)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (unsigned char)c62)
        return 62;
    if (c == (unsigned char)c63)
        return 63;
    return -1;
}

/* Decodes digits (no padding) into out (at most out_cap bytes). strict: the
 * leftover bits must be zero, so that each value has one encoding. */
static long base64_decode_with(const char *in, size_t digits, unsigned char *out, size_t out_cap, char c62,
                               char c63, int strict)
{
    unsigned long acc = 0;
    int bits = 0;
    size_t n = 0;

    if (digits % 4 == 1)
        return -1;
    for (size_t i = 0; i < digits; i++) {
        int v = base64_value((unsigned char)in[i], c62, c63);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned long)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == out_cap)
                return -1;
            out[n++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    if (strict && bits > 0 && (acc & ((1UL << bits) - 1)) != 0)
        return -1;
    return (long)n;
}

size_t crier_base64_encode(const unsigned char *in, size_t len, char *out)
{
    return base64_encode_with(in, len, out, base64_alphabet, 1);
}

long crier_base64_decode(const char *in, size_t len, unsigned char *out)
{
    size_t pad = 0;

    while (pad < 2 && len > 0 && in[len - 1] == '=') {
        len--;
        pad++;
    }
    if (pad > 0 && (len + pad) % 4 != 0)
        return -1;
    return base64_decode_with(in, len, out, (size_t)-1, '+', '/', 0);
}

size_t crier_base64url_encode(const unsigned char *in, size_t len, char *out)
{
    return base64_encode_with(in, len, out, base64url_alphabet, 0);
}

long crier_base64url_decode(const char *in, size_t len, unsigned char *out, size_t out_cap)
{
    return base64_decode_with(in, len, out, out_cap, '-', '_', 1);
}
