/* curl_ev.h — libcurl's multi interface driven by a libev loop: one ev_io per
 * socket curl asks about, one ev_timer for curl's timeout, completions handed
 * to the owner from the loop. Shared by the channels that speak through
 * libcurl (webhook, email).
 *
 * Layer: channels (src/channels/), may use base.
 * Calls into: log (base).
 */
#ifndef CRIER_CURL_EV_H
#define CRIER_CURL_EV_H

#include <curl/curl.h>
#include <stdbool.h>
#include <sys/socket.h>

struct ev_loop;

typedef struct crier_curl_ev crier_curl_ev;

/* A transfer completed: easy has already been removed from the multi handle
 * and belongs to the owner again. Called from the loop only, never from inside
 * crier_curl_ev_add. The owner may call crier_curl_ev_close from here. */
typedef void (*crier_curl_ev_done_fn)(void *ud, CURL *easy, CURLcode code);

/* The driver is going away: the owner must remove (crier_curl_ev_remove) and
 * free its transfers still in flight, and may free itself. Called exactly once,
 * when no done callback is running. */
typedef void (*crier_curl_ev_destroy_fn)(void *ud);

/* Creates a driver on loop keeping up to max_connects cached connections.
 * Returns NULL on failure (logged under module). */
crier_curl_ev *crier_curl_ev_new(struct ev_loop *loop, long max_connects, const char *module,
                                 crier_curl_ev_done_fn done, crier_curl_ev_destroy_fn destroy, void *ud);

/* At most n connections open at once (CURLMOPT_MAX_TOTAL_CONNECTIONS):
 * transfers past that wait in libcurl's queue for one to free (their total
 * timeout runs meanwhile). Returns CURLM_OK or libcurl's error. */
CURLMcode crier_curl_ev_limit_connections(crier_curl_ev *c, long n);

/* The certificates easy's TLS connections are verified against: ca_file (PEM
 * CA certificates) when not NULL, else libcurl's default bundle; never a CA
 * directory. libcurl keeps a multi handle's parsed CA store for its later
 * connections only while no CA directory is set, and Debian's libcurl sets
 * /etc/ssl/certs by default: every new TLS connection parsed the whole bundle
 * again (OpenSSL's PEM decoding, most of crier's CPU in a burst), and a burst
 * of 3,000 webhooks to one https receiver timed out 13 % of its first
 * handshakes (docs/BENCHMARKS.md, bench deliver, twenty-second session).
 * Returns CURLE_OK or libcurl's error. */
CURLcode crier_curl_ev_set_trust(CURL *easy, const char *ca_file);

/* Starts a transfer. Also sets easy's socket open/close callbacks, so that the
 * driver knows every socket and can shut them down at close (a cached SMTP
 * connection would otherwise make curl_multi_cleanup wait for a QUIT reply).
 * Returns 0, or -1 (logged) if curl refused the handle. */
int crier_curl_ev_add(crier_curl_ev *c, CURL *easy);

/* Decides whether a transfer may open a connection to addr (addr_len bytes,
 * the address curl resolved and is about to connect to). Returns true to
 * allow; false makes curl skip that address without opening a socket. */
typedef bool (*crier_curl_ev_guard_fn)(void *ud, const struct sockaddr *addr, socklen_t addr_len);

/* A per-transfer connection guard, owned by the caller and kept alive (at the
 * same address) until the transfer completes or is removed. */
typedef struct {
    crier_curl_ev_guard_fn check;
    void *ud;             /* passed to check */
    crier_curl_ev *owner; /* set by crier_curl_ev_add_guarded */
} crier_curl_ev_guard;

/* Like crier_curl_ev_add, but every socket the transfer would open is first
 * put to guard->check (connection reuse opens none: a cached connection was
 * checked when it was opened, so all transfers of one driver should share one
 * policy). Returns 0, or -1 (logged). */
int crier_curl_ev_add_guarded(crier_curl_ev *c, CURL *easy, crier_curl_ev_guard *guard);

/* Removes a transfer that has not completed (the owner then owns easy). */
void crier_curl_ev_remove(crier_curl_ev *c, CURL *easy);

/* True once close was requested. */
bool crier_curl_ev_closing(const crier_curl_ev *c);

/* Requests the end: no more completions are dispatched; the destroy callback
 * runs now, or right after the done callback that called this returns; then
 * every socket is shut down and the driver freed. NULL is a no-op. */
void crier_curl_ev_close(crier_curl_ev *c);

#endif
