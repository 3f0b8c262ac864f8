/* target_guard.c — the SSRF guard: address classification, allow decisions
 * and the allow-list parser (see target_guard.h). Channels call it with the
 * address they are about to connect to, after DNS, so a name that resolves (or
 * re-resolves) to an internal address is caught too. */
#include "target_guard.h"

#include "log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* True when the top `bits` bits of a equal those of net (host byte order). */
static bool target_v4_in(uint32_t a, uint32_t net, int bits)
{
    uint32_t mask = bits == 0 ? 0 : 0xffffffffu << (32 - bits);

    return (a & mask) == (net & mask);
}

static crier_target_class target_classify_v4(uint32_t a)
{
    if (target_v4_in(a, 0x7f000000u, 8)) /* 127.0.0.0/8 */
        return CRIER_TARGET_LOOPBACK;
    if (target_v4_in(a, 0x0a000000u, 8) ||  /* 10.0.0.0/8 */
        target_v4_in(a, 0xac100000u, 12) || /* 172.16.0.0/12 */
        target_v4_in(a, 0xc0a80000u, 16) || /* 192.168.0.0/16 */
        target_v4_in(a, 0x64400000u, 10) || /* 100.64.0.0/10, CGNAT */
        target_v4_in(a, 0xc6120000u, 15))   /* 198.18.0.0/15, benchmarking */
        return CRIER_TARGET_PRIVATE;
    if (target_v4_in(a, 0xa9fe0000u, 16)) /* 169.254.0.0/16 */
        return CRIER_TARGET_LINK_LOCAL;
    if (target_v4_in(a, 0x00000000u, 8) ||  /* 0.0.0.0/8, "this network" */
        target_v4_in(a, 0xc0000000u, 24) || /* 192.0.0.0/24, IETF protocol assignments */
        target_v4_in(a, 0xc0000200u, 24) || /* 192.0.2.0/24, TEST-NET-1 */
        target_v4_in(a, 0xc6336400u, 24) || /* 198.51.100.0/24, TEST-NET-2 */
        target_v4_in(a, 0xcb007100u, 24) || /* 203.0.113.0/24, TEST-NET-3 */
        target_v4_in(a, 0xe0000000u, 4) ||  /* 224.0.0.0/4, multicast */
        target_v4_in(a, 0xf0000000u, 4))    /* 240.0.0.0/4, reserved, broadcast */
        return CRIER_TARGET_SPECIAL;
    return CRIER_TARGET_PUBLIC;
}

static uint32_t target_v4_from(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static crier_target_class target_classify_v6(const uint8_t a[16])
{
    static const uint8_t zero[12] = {0};
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t discard[8] = {0x01, 0x00, 0, 0, 0, 0, 0, 0};
    static const uint8_t doc[4] = {0x20, 0x01, 0x0d, 0xb8};

    /* ::ffff:a.b.c.d and 64:ff9b::a.b.c.d reach an IPv4 address. */
    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return target_classify_v4(target_v4_from(a + 12));
    if (memcmp(a, zero, 12) == 0) {
        uint32_t low = target_v4_from(a + 12);
        if (low == 1) /* ::1 */
            return CRIER_TARGET_LOOPBACK;
        return CRIER_TARGET_SPECIAL; /* :: and deprecated IPv4-compatible ::a.b.c.d */
    }
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) /* fe80::/10 */
        return CRIER_TARGET_LINK_LOCAL;
    if ((a[0] & 0xfe) == 0xfc ||                /* fc00::/7, unique local */
        (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)) /* fec0::/10, old site-local */
        return CRIER_TARGET_PRIVATE;
    if (a[0] == 0xff ||                      /* ff00::/8, multicast */
        memcmp(a, discard, 8) == 0 ||        /* 100::/64, discard-only */
        memcmp(a, doc, 4) == 0)              /* 2001:db8::/32, documentation */
        return CRIER_TARGET_SPECIAL;
    return CRIER_TARGET_PUBLIC;
}

crier_target_class crier_target_classify(const struct sockaddr *addr, socklen_t addr_len)
{
    if (!addr || addr_len < (socklen_t)sizeof(sa_family_t))
        return CRIER_TARGET_SPECIAL;
    if (addr->sa_family == AF_INET && addr_len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;

        memcpy(&in, addr, sizeof in);
        return target_classify_v4(ntohl(in.sin_addr.s_addr));
    }
    if (addr->sa_family == AF_INET6 && addr_len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;

        memcpy(&in6, addr, sizeof in6);
        return target_classify_v6(in6.sin6_addr.s6_addr);
    }
    return CRIER_TARGET_SPECIAL;
}

const char *crier_target_class_name(crier_target_class cls)
{
    switch (cls) {
    case CRIER_TARGET_PUBLIC:
        return "public";
    case CRIER_TARGET_LOOPBACK:
        return "loopback";
    case CRIER_TARGET_PRIVATE:
        return "private";
    case CRIER_TARGET_LINK_LOCAL:
        return "link-local";
    case CRIER_TARGET_SPECIAL:
        break;
    }
    return "special-purpose";
}

/* The allow bit that opens cls, or 0 when no bit does. */
static unsigned target_allow_bit(crier_target_class cls)
{
    switch (cls) {
    case CRIER_TARGET_LOOPBACK:
        return CRIER_TARGET_ALLOW_LOOPBACK;
    case CRIER_TARGET_PRIVATE:
        return CRIER_TARGET_ALLOW_PRIVATE;
    case CRIER_TARGET_LINK_LOCAL:
        return CRIER_TARGET_ALLOW_LINK_LOCAL;
    case CRIER_TARGET_PUBLIC:
    case CRIER_TARGET_SPECIAL:
        break;
    }
    return 0;
}

bool crier_target_allowed(crier_target_class cls, unsigned allow)
{
    unsigned bit;

    if (cls == CRIER_TARGET_PUBLIC)
        return true;
    bit = target_allow_bit(cls);
    return bit != 0 && (allow & bit) != 0;
}

/* Writes addr's numeric form ("127.0.0.1", "::ffff:127.0.0.1") into out. */
static void target_format_address(const struct sockaddr *addr, socklen_t addr_len, char *out, size_t out_len)
{
    const char *s = NULL;

    if (addr && addr->sa_family == AF_INET && addr_len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;

        memcpy(&in, addr, sizeof in);
        s = inet_ntop(AF_INET, &in.sin_addr, out, (socklen_t)out_len);
    } else if (addr && addr->sa_family == AF_INET6 && addr_len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;

        memcpy(&in6, addr, sizeof in6);
        s = inet_ntop(AF_INET6, &in6.sin6_addr, out, (socklen_t)out_len);
    }
    if (!s)
        snprintf(out, out_len, "a non-IP address (family %d)", addr ? (int)addr->sa_family : -1);
}

int crier_target_check(const struct sockaddr *addr, socklen_t addr_len, unsigned allow, char *err,
                       size_t err_len)
{
    crier_target_class cls = crier_target_classify(addr, addr_len);
    char text[INET6_ADDRSTRLEN + 32];

    if (crier_target_allowed(cls, allow))
        return 0;
    target_format_address(addr, addr_len, text, sizeof text);
    if (cls == CRIER_TARGET_SPECIAL)
        crier_set_error(err, err_len, "%s is a special-purpose address, never allowed", text);
    else
        crier_set_error(err, err_len, "%s is a %s address; allow it with --allow-targets %s", text,
                        crier_target_class_name(cls), crier_target_class_name(cls));
    return -1;
}

/* The words of an allow list and their bits, in the order they are printed. */
static const struct {
    const char *word;
    unsigned bit;
} target_allow_words[] = {
    {"loopback", CRIER_TARGET_ALLOW_LOOPBACK},
    {"private", CRIER_TARGET_ALLOW_PRIVATE},
    {"link-local", CRIER_TARGET_ALLOW_LINK_LOCAL},
};
#define TARGET_N_WORDS (sizeof target_allow_words / sizeof target_allow_words[0])

int crier_target_parse_allow(const char *list, unsigned *allow, char *err, size_t err_len)
{
    unsigned mask = 0;
    int saw_none = 0, saw_word = 0;
    const char *p = list;

    if (!list || !allow) {
        crier_set_error(err, err_len, "no allow-targets list given; accepted words: %s",
                        CRIER_TARGET_ALLOW_WORDS);
        return -1;
    }
    for (;;) {
        const char *start, *end, *comma = strchr(p, ',');
        size_t len, i;

        end = comma ? comma : p + strlen(p);
        start = p;
        while (start < end && (*start == ' ' || *start == '\t'))
            start++;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        len = (size_t)(end - start);
        if (len == 0) {
            crier_set_error(err, err_len, "empty word in allow-targets list \"%.64s\"; accepted words: %s",
                            list, CRIER_TARGET_ALLOW_WORDS);
            return -1;
        }
        if (len == 4 && strncasecmp(start, "none", 4) == 0) {
            saw_none = 1;
        } else {
            for (i = 0; i < TARGET_N_WORDS; i++) {
                if (strlen(target_allow_words[i].word) == len &&
                    strncasecmp(start, target_allow_words[i].word, len) == 0)
                    break;
            }
            if (i == TARGET_N_WORDS) {
                crier_set_error(err, err_len, "unknown word \"%.*s\" in allow-targets list; accepted words: %s",
                                len > 64 ? 64 : (int)len, start, CRIER_TARGET_ALLOW_WORDS);
                return -1;
            }
            mask |= target_allow_words[i].bit;
            saw_word = 1;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (saw_none && saw_word) {
        crier_set_error(err, err_len, "\"none\" cannot be combined with other words in allow-targets list \"%.64s\"",
                        list);
        return -1;
    }
    *allow = mask;
    return 0;
}

int crier_target_format_allow(unsigned allow, char *out, size_t out_len)
{
    size_t n = 0;

    if (!out || out_len == 0)
        return -1;
    out[0] = '\0';
    for (size_t i = 0; i < TARGET_N_WORDS; i++) {
        int w;

        if (!(allow & target_allow_words[i].bit))
            continue;
        w = snprintf(out + n, out_len - n, "%s%s", n ? "," : "", target_allow_words[i].word);
        if (w < 0 || (size_t)w >= out_len - n)
            return -1;
        n += (size_t)w;
    }
    if (n == 0 && snprintf(out, out_len, "none") >= (int)out_len)
        return -1;
    return 0;
}
