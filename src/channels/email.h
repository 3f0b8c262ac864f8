/* email.h — the email channel's sender: builds an RFC 5322 / MIME message
 * (deterministic Message-ID and boundary from the notification key, RFC 2047
 * headers, quoted-printable parts) and submits it over SMTP through libcurl's
 * multi interface, driven by a libev loop (socket and timer callbacks; never
 * curl_easy_perform).
 *
 * Layer: channels (src/channels/), may use base.
 * Calls into: base64 (base), clock (base), curl_ev, log (base).
 */
#ifndef CRIER_EMAIL_H
#define CRIER_EMAIL_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_email_sender crier_email_sender;

/* Zero (or NULL) fields mean the default, so a zeroed struct works. */
typedef struct {
    long connect_timeout_ms;       /* default 10000 */
    long total_timeout_ms;         /* whole SMTP transaction; default 60000 */
    int max_inflight;              /* concurrent transactions (connections); default 64 */
    int max_queued;                /* messages accepted at once, those past max_inflight
                                    * waiting for a connection; default 512 (the delivery
                                    * worker's --max-inflight: a refused send is a dead
                                    * delivery), never below max_inflight */
    const char *message_id_domain; /* right side of Message-ID; default "crier.invalid" */
    int require_tls;               /* 1: smtp:// must upgrade with STARTTLS (CURLUSESSL_ALL);
                                    * 0: STARTTLS when offered (CURLUSESSL_TRY) */
    const char *ca_file;           /* PEM CA certificates for the server's certificate;
                                    * NULL: libcurl's default bundle */
} crier_email_options;

/* The content of one message. Strings are UTF-8 and NUL-terminated. */
typedef struct {
    const char *message_id;   /* the notification key, e.g. "msg_45a9…": Message-ID
                               * "<message_id@domain>", Idempotency-Key and
                               * X-Crier-Notification; [A-Za-z0-9._+=-], 1..200 bytes */
    const char *from_address; /* envelope MAIL FROM and From: (required) */
    const char *from_name;    /* display name, may be NULL */
    const char *to_address;   /* envelope RCPT TO and To: (required) */
    const char *to_name;      /* display name, may be NULL */
    const char *subject;      /* may be NULL (empty subject) */
    const char *text;         /* text/plain part, NULL if absent */
    const char *html;         /* text/html part, NULL if absent (not both) */
    int64_t date;             /* unix seconds for the Date header; 0 = now */
} crier_email_message;

/* One request. Everything is copied by crier_email_send. */
typedef struct {
    int64_t token;        /* opaque to the sender: handed back in the result */
    int64_t delivery_id;  /* the delivery's id (crier.deliveries.id), for the log only */
    const char *url;      /* smtp://host[:port][/ehlo-name] or smtps://… */
    const char *username; /* AUTH when non-NULL */
    const char *password; /* with username */
    crier_email_message message;
} crier_email_request;

/* The outcome of one request, passed to the completion callback. The pointers
 * are valid only during the callback. */
typedef struct {
    int64_t token; /* the request's token */
    long smtp_code;    /* last SMTP reply code (CURLINFO_RESPONSE_CODE); 0 if none */
    const char *error; /* NULL when the server accepted the message; else why not */
    int timed_out;     /* 1 on a connect or total timeout: ambiguous, may have arrived */
    int permanent;     /* 1 when the server refused with a 5xx other than the AUTH/TLS
                        * policy replies 530/534/535/538: retrying will not help */
    double duration_ms;
} crier_email_result;

typedef void (*crier_email_done_fn)(void *ud, const crier_email_result *result);

/* Creates a sender on loop. opts may be NULL for defaults (opts' strings are
 * copied). done is called once per accepted request, from the loop. Returns
 * NULL on failure (logged). */
crier_email_sender *crier_email_sender_new(struct ev_loop *loop, const crier_email_options *opts,
                                           crier_email_done_fn done, void *ud);

/* Formats req->message and queues its submission. Returns 0 if accepted (done
 * will be called, never from inside this call), -1 if refused (logged): sender
 * full (check crier_email_inflight first), a url that is not smtp(s), or a
 * message crier_email_format refuses. */
int crier_email_send(crier_email_sender *s, const crier_email_request *req);

/* Number of accepted requests whose done callback has not run yet. */
int crier_email_inflight(const crier_email_sender *s);

/* Aborts all transactions without calling done, and frees the sender. May be
 * called from inside a done callback. NULL is a no-op. */
void crier_email_sender_free(crier_email_sender *s);

/* Builds the message text for m: headers From, To, Subject, Date, Message-ID,
 * Idempotency-Key, X-Crier-Notification, Auto-Submitted, MIME-Version, then a
 * multipart/alternative body (text/plain and text/html, quoted-printable,
 * UTF-8), or a single part when only one is given. CRLF line endings, body
 * lines ≤ 76 bytes, header lines well under 998. Byte-identical for the same m
 * apart from Date (the boundary is derived from message_id).
 *
 * Hostile input: addresses with CR/LF, other controls, spaces, non-ASCII,
 * '<' '>' '"' '(' ')' ',' ';' ':' '\\' '[' ']', or not exactly one '@' with
 * text on both sides, and message ids or domains outside their alphabets, are
 * refused. Control characters in the subject and display names (CR, LF, TAB,
 * …) become spaces and invalid UTF-8 becomes U+FFFD, so a payload-derived
 * subject can never start a header of its own. o may be NULL (defaults).
 *
 * Returns 0 with *out a malloc'd NUL-terminated buffer (the caller frees it)
 * and *out_len its length; or -1 with a message in err (when err_len > 0) and
 * *out untouched. */
int crier_email_format(const crier_email_message *m, const crier_email_options *o, char **out,
                       size_t *out_len, char *err, size_t err_len);

#endif
