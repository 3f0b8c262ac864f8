/* base64.c — standard base64 encoding and strict decoding (see base64.h). */
#include "base64.h"

static const char base64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t crier_base64_encode(const unsigned char *in, size_t len, char *out)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i += 3) {
        unsigned long v = (unsigned long)in[i] << 16;

        if (i + 1 < len)
            v |= (unsigned long)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = base64_alphabet[(v >> 18) & 63];
        out[o++] = base64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < len ? base64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? base64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

/* The value of one base64 digit, or -1. */
static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long crier_base64_decode(const char *in, size_t len, unsigned char *out)
{
    unsigned long acc = 0;
    int bits = 0;
    size_t digits, pad = 0;
    long n = 0;

    while (pad < 2 && len > 0 && in[len - 1] == '=') {
        len--;
        pad++;
    }
    digits = len;
    if (digits % 4 == 1 || (pad > 0 && (digits + pad) % 4 != 0))
        return -1;
    for (size_t i = 0; i < digits; i++) {
        int v = base64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned long)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    return n;
}
