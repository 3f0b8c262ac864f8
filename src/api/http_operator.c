/* http_operator.c — who may use the operator's status page: loopback by
 * default, the operator key when one is set, and no change from another site
 * (see http_operator.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_operator.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

bool crier_http_operator_key_equal(const char *s, const char *key)
{
    size_t n = strlen(s), k = strlen(key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < k; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < n ? s[i] : 0);
    return diff == 0;
}

/* The client's address as text into buf; true when it is on loopback. */
static bool operator_client_loopback(crier_http_request *r, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = info ? info->client_addr : NULL;
    snprintf(buf, len, "unknown");
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)len);
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        inet_ntop(AF_INET6, a, buf, (socklen_t)len);
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* True when host (a Host header, or the part of an Origin after "http://")
 * names a loopback host, with or without a port. */
static bool operator_host_loopback(const char *host)
{
    size_t n;
    if (!strncasecmp(host, "localhost", 9))
        n = 9;
    else if (!strncmp(host, "[::1]", 5))
        n = 5;
    else if (!strncmp(host, "127.", 4))
        n = 4 + strspn(host + 4, "0123456789.");
    else
        return false;
    return host[n] == '\0' || (host[n] == ':' && host[n + 1] &&
                               strspn(host + n + 1, "0123456789") == strlen(host + n + 1));
}

/* Turns the refusal crier_http_error just set into an HTML page for the
 * page's route (a browser shows it), the JSON error escaped inside it.
 * Returns -1. */
static int operator_refused(crier_http_request *r, crier_operator_access access)
{
    crier_json_buf html = {0};
    if (access != CRIER_OPERATOR_PAGE)
        return -1;
    crier_json_buf_printf(&html,
                          "<!doctype html><html><head><meta charset=\"utf-8\">"
                          "<title>crier status: refused</title></head><body>"
                          "<h1>crier status: refused (%u)</h1><pre>",
                          r->status);
    for (size_t i = 0; i < r->response.len; i++) {
        char c = r->response.data[i];
        switch (c) {
        case '<':
            crier_json_buf_puts(&html, "&lt;");
            break;
        case '>':
            crier_json_buf_puts(&html, "&gt;");
            break;
        case '&':
            crier_json_buf_puts(&html, "&amp;");
            break;
        default:
            crier_json_buf_add(&html, &c, 1);
        }
    }
    crier_json_buf_puts(&html, "</pre><p>See docs/OPERATIONS.md, \"The status page\".</p>"
                               "</body></html>\n");
    r->content_type = "text/html; charset=utf-8";
    crier_http_reply(r, r->status, html.data, html.len);
    crier_json_buf_free(&html);
    return -1;
}

int crier_http_operator_check(crier_http_request *r, crier_operator_access access)
{
    const char *key = r->ctx->operator_key;
    const char *auth, *host, *origin;
    char addr[INET6_ADDRSTRLEN + 1], msg[768];

    if (key) {
        if (access == CRIER_OPERATOR_PAGE)
            return 0; /* the page holds no data: it asks for the key */
        auth = crier_http_header(r, "Authorization");
        if (!auth || strncasecmp(auth, "Bearer ", 7))
            return crier_http_error(r, 401, "unauthorized",
                                    "the status page needs the operator key that crier serve was "
                                    "started with (--operator-key or CRIER_OPERATOR_KEY): send "
                                    "Authorization: Bearer <key>");
        if (!crier_http_operator_key_equal(auth + 7, key))
            return crier_http_error(r, 401, "invalid_operator_key",
                                    "this is not the operator key crier serve was started with "
                                    "(--operator-key or CRIER_OPERATOR_KEY)");
        return 0; /* a Bearer key is never sent by a browser on its own: no CSRF */
    }
    if (!operator_client_loopback(r, addr, sizeof addr)) {
        snprintf(msg, sizeof msg,
                 "the status page answers only clients on loopback (this request came from %s): "
                 "open it on the server's host, or through an SSH tunnel (ssh -L "
                 "8080:127.0.0.1:PORT HOST, then http://127.0.0.1:8080/), or start crier serve "
                 "with --operator-key (or CRIER_OPERATOR_KEY) and send the key as "
                 "Authorization: Bearer <key>",
                 addr);
        crier_http_error(r, 403, "operator_only", "%s", msg);
        return operator_refused(r, access);
    }
    host = crier_http_header(r, "Host");
    if (host && !operator_host_loopback(host)) {
        snprintf(msg, sizeof msg,
                 "the status page answers only requests for a loopback host name (127.0.0.1, "
                 "localhost, [::1]), not %.200s: a page of another site may have renamed itself "
                 "to this address (DNS rebinding)",
                 host);
        crier_http_error(r, 403, "operator_only", "%s", msg);
        return operator_refused(r, access);
    }
    origin = crier_http_header(r, "Origin");
    if (origin && (strncmp(origin, "http://", 7) || !host || strcasecmp(origin + 7, host))) {
        snprintf(msg, sizeof msg,
                 "the status page answers browsers only from its own page, not from %.200s",
                 origin);
        crier_http_error(r, 403, "operator_only", "%s", msg);
        return operator_refused(r, access);
    }
    if (access == CRIER_OPERATOR_ACTION && !crier_http_header(r, CRIER_OPERATOR_HEADER))
        return crier_http_error(r, 403, "csrf_header_required",
                                "a replay must carry the header " CRIER_OPERATOR_HEADER
                                ": 1 (the status page sends it; a form of another site "
                                "cannot), or the operator key as Authorization: Bearer");
    return 0;
}
