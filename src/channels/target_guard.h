/* target_guard.h — the SSRF guard of outgoing deliveries: classifies the
 * address a channel is about to connect to (public, loopback, private,
 * link-local, special-purpose) and decides, against an allow mask, whether the
 * connection may go ahead; parses the "loopback,private,link-local" allow list
 * of --allow-targets / CRIER_ALLOW_TARGETS. Pure functions: no I/O, no DNS.
 *
 * Layer: channels (src/channels/), may use base.
 * Calls into: log (base).
 */
#ifndef CRIER_TARGET_GUARD_H
#define CRIER_TARGET_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* What an address is. The IPv4 ranges are checked on the embedded address of
 * IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) IPv6 addresses. */
typedef enum {
    CRIER_TARGET_PUBLIC = 0, /* anything not listed below */
    CRIER_TARGET_LOOPBACK,   /* 127.0.0.0/8, ::1 */
    CRIER_TARGET_PRIVATE,    /* 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT),
                                198.18/15 (benchmarking), fc00::/7 (ULA, includes
                                the AWS metadata fd00:ec2::254), fec0::/10 */
    CRIER_TARGET_LINK_LOCAL, /* 169.254.0.0/16 (cloud metadata 169.254.169.254), fe80::/10 */
    CRIER_TARGET_SPECIAL     /* never allowed: 0.0.0.0/8, 192.0.0.0/24, the
                                documentation nets 192.0.2/24, 198.51.100/24,
                                203.0.113/24, multicast 224/4, reserved 240/4 and
                                broadcast; ::, other ::/96 (IPv4-compatible),
                                100::/64, 2001:db8::/32, ff00::/8; any other
                                address family or a truncated address */
} crier_target_class;

/* Allow mask bits: which non-public classes a sender may connect to. 0 (none)
 * means public addresses only. Special-purpose addresses are never allowed. */
#define CRIER_TARGET_ALLOW_NONE 0u
#define CRIER_TARGET_ALLOW_LOOPBACK 1u
#define CRIER_TARGET_ALLOW_PRIVATE 2u
#define CRIER_TARGET_ALLOW_LINK_LOCAL 4u

/* The words crier_target_parse_allow accepts, for help texts. */
#define CRIER_TARGET_ALLOW_WORDS "loopback, private, link-local, none"

/* Room for the longest message crier_target_check writes. */
#define CRIER_TARGET_ERROR_LEN 160

/* Classifies addr (addr_len bytes: a sockaddr_in or sockaddr_in6). NULL, a
 * short length or another family is CRIER_TARGET_SPECIAL. */
crier_target_class crier_target_classify(const struct sockaddr *addr, socklen_t addr_len);

/* The class's name as written in messages and allow lists: "public",
 * "loopback", "private", "link-local", "special-purpose". Static storage. */
const char *crier_target_class_name(crier_target_class cls);

/* True when a connection to an address of class cls is allowed under the
 * allow mask (public: always; special-purpose: never). */
bool crier_target_allowed(crier_target_class cls, unsigned allow);

/* Classifies addr and decides. Returns 0 when the connection is allowed, -1
 * when it is not; then writes into err (err_len bytes, may be NULL/0; see
 * CRIER_TARGET_ERROR_LEN) a message naming the address and the remedy, e.g.
 * "127.0.0.1 is a loopback address; allow it with --allow-targets loopback"
 * or "0.0.0.0 is a special-purpose address, never allowed". */
int crier_target_check(const struct sockaddr *addr, socklen_t addr_len, unsigned allow, char *err,
                       size_t err_len);

/* Parses a comma-separated allow list ("loopback,private,link-local", or
 * "none") into *allow. Words are case-insensitive, blanks around them are
 * ignored, repeats are harmless; "none" cannot be combined with other words.
 * Returns 0 with *allow set, or -1 with *allow untouched and a message in err
 * naming the bad word and the accepted ones. */
int crier_target_parse_allow(const char *list, unsigned *allow, char *err, size_t err_len);

/* Writes the allow mask as a list crier_target_parse_allow reads back
 * ("none", "loopback", "loopback,private,link-local", …) into out. Returns 0,
 * or -1 if out is too small (32 bytes always suffice). */
int crier_target_format_allow(unsigned allow, char *out, size_t out_len);

#endif
