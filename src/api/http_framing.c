/* http_framing.c — the framing check of a request's headers, before its body
 * is read (see http_framing.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_framing.h"

#include "log.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#define FRAMING_CONTENT_LENGTH "Content-Length"
#define FRAMING_TRANSFER_ENCODING "Transfer-Encoding"

typedef struct {
    int content_lengths;
    const char *content_length[2]; /* the first two values */
    int transfer_encodings;
    const char *transfer_encoding; /* the first value */
    const char *bad_name;          /* a header name that is not a token */
    const char *disguised;         /* a name that starts like a framing header */
} framing_seen;

/* RFC 9110's tchar: the characters of a header name. */
static bool framing_is_token(const char *s, size_t len)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c && strchr(extra, c))))
            return false;
    }
    return true;
}

static bool framing_starts_with(const char *name, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len > n && !strncasecmp(name, prefix, n);
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      size_t key_size, const char *value, size_t value_size)
{
    framing_seen *seen = cls;
    (void)kind;
    (void)value_size;
    if (!framing_is_token(key, key_size)) {
        if (!seen->bad_name)
            seen->bad_name = key;
    } else if (key_size == strlen(FRAMING_CONTENT_LENGTH) &&
               !strcasecmp(key, FRAMING_CONTENT_LENGTH)) {
        if (seen->content_lengths < 2)
            seen->content_length[seen->content_lengths] = value ? value : "";
        seen->content_lengths++;
    } else if (key_size == strlen(FRAMING_TRANSFER_ENCODING) &&
               !strcasecmp(key, FRAMING_TRANSFER_ENCODING)) {
        if (!seen->transfer_encodings)
            seen->transfer_encoding = value ? value : "";
        seen->transfer_encodings++;
    } else if (framing_starts_with(key, key_size, FRAMING_CONTENT_LENGTH) ||
               framing_starts_with(key, key_size, FRAMING_TRANSFER_ENCODING)) {
        if (!seen->disguised)
            seen->disguised = key;
    }
    return MHD_YES;
}

int crier_http_framing_check(struct MHD_Connection *conn, const char *version, char *err,
                             size_t err_len)
{
    framing_seen seen;
    memset(&seen, 0, sizeof seen);
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, framing_header, &seen);

    if (seen.bad_name) {
        crier_set_error(err, err_len,
                        "the header name '%.60s' is not a valid name (a space before its colon, or "
                        "a line folded onto it?): send each header on one line as Name: value",
                        seen.bad_name);
        return -1;
    }
    if (seen.disguised) {
        crier_set_error(err, err_len,
                        "the header '%.60s' is not Content-Length or Transfer-Encoding but looks "
                        "like one (a line folded onto it?): send each header on one line",
                        seen.disguised);
        return -1;
    }
    if (seen.content_lengths > 1) {
        bool same = !strcmp(seen.content_length[0], seen.content_length[1]);
        crier_set_error(err, err_len,
                        "Content-Length is given %d times (%.20s and %.20s%s): send it once",
                        seen.content_lengths, seen.content_length[0], seen.content_length[1],
                        same ? ", the same value" : ", different values");
        return -1;
    }
    if (seen.transfer_encodings > 1) {
        crier_set_error(err, err_len,
                        "Transfer-Encoding is given %d times: send it once, as "
                        "Transfer-Encoding: chunked",
                        seen.transfer_encodings);
        return -1;
    }
    if (seen.transfer_encodings && seen.content_lengths) {
        crier_set_error(err, err_len,
                        "the request has both Content-Length and Transfer-Encoding: send one of "
                        "them, not both");
        return -1;
    }
    if (seen.transfer_encodings && strcasecmp(seen.transfer_encoding, "chunked")) {
        crier_set_error(err, err_len,
                        "Transfer-Encoding '%.40s' is not supported: send the body with "
                        "Content-Length, or with Transfer-Encoding: chunked alone",
                        seen.transfer_encoding);
        return -1;
    }
    if (seen.transfer_encodings && version && !strcmp(version, MHD_HTTP_VERSION_1_0)) {
        crier_set_error(err, err_len,
                        "an HTTP/1.0 request cannot use Transfer-Encoding: send the body with "
                        "Content-Length, or use HTTP/1.1");
        return -1;
    }
    return 0;
}
