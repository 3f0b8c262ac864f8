/* test_target_guard.c — tests the SSRF guard: table-driven classification of
 * IPv4, IPv6 and IPv4-mapped addresses, allow-mask decisions and their
 * messages, and the allow-list parser with its errors. */
#include "target_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "check.h"

/* Fills ss from a numeric address (v4 or v6); returns its length, 0 if bad. */
static socklen_t make_addr(const char *text, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (strchr(text, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(443);
        return inet_pton(AF_INET6, text, &a->sin6_addr) == 1 ? sizeof *a : 0;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(443);
        return inet_pton(AF_INET, text, &a->sin_addr) == 1 ? sizeof *a : 0;
    }
}

static crier_target_class classify(const char *text)
{
    struct sockaddr_storage ss;
    socklen_t len = make_addr(text, &ss);

    if (len == 0) {
        fprintf(stderr, "bad test address %s\n", text);
        check_failures++;
        return CRIER_TARGET_PUBLIC;
    }
    return crier_target_classify((struct sockaddr *)&ss, len);
}

static void test_classify(void)
{
    static const struct {
        const char *addr;
        crier_target_class cls;
    } cases[] = {
        /* IPv4 public, including neighbours of every private range. */
        {"8.8.8.8", CRIER_TARGET_PUBLIC},
        {"1.1.1.1", CRIER_TARGET_PUBLIC},
        {"93.184.216.34", CRIER_TARGET_PUBLIC},
        {"1.0.0.0", CRIER_TARGET_PUBLIC},
        {"9.255.255.255", CRIER_TARGET_PUBLIC},
        {"11.0.0.0", CRIER_TARGET_PUBLIC},
        {"126.255.255.255", CRIER_TARGET_PUBLIC},
        {"128.0.0.0", CRIER_TARGET_PUBLIC},
        {"172.15.255.255", CRIER_TARGET_PUBLIC},
        {"172.32.0.0", CRIER_TARGET_PUBLIC},
        {"192.167.255.255", CRIER_TARGET_PUBLIC},
        {"192.169.0.0", CRIER_TARGET_PUBLIC},
        {"100.63.255.255", CRIER_TARGET_PUBLIC},
        {"100.128.0.0", CRIER_TARGET_PUBLIC},
        {"169.253.255.255", CRIER_TARGET_PUBLIC},
        {"169.255.0.0", CRIER_TARGET_PUBLIC},
        {"198.17.255.255", CRIER_TARGET_PUBLIC},
        {"198.20.0.0", CRIER_TARGET_PUBLIC},
        {"223.255.255.255", CRIER_TARGET_PUBLIC},
        {"192.0.1.1", CRIER_TARGET_PUBLIC},
        /* IPv4 loopback. */
        {"127.0.0.1", CRIER_TARGET_LOOPBACK},
        {"127.0.0.0", CRIER_TARGET_LOOPBACK},
        {"127.1.2.3", CRIER_TARGET_LOOPBACK},
        {"127.255.255.255", CRIER_TARGET_LOOPBACK},
        /* IPv4 private. */
        {"10.0.0.0", CRIER_TARGET_PRIVATE},
        {"10.255.255.255", CRIER_TARGET_PRIVATE},
        {"172.16.0.1", CRIER_TARGET_PRIVATE},
        {"172.31.255.255", CRIER_TARGET_PRIVATE},
        {"192.168.0.1", CRIER_TARGET_PRIVATE},
        {"192.168.255.255", CRIER_TARGET_PRIVATE},
        {"100.64.0.0", CRIER_TARGET_PRIVATE},
        {"100.127.255.255", CRIER_TARGET_PRIVATE},
        {"198.18.0.1", CRIER_TARGET_PRIVATE},
        {"198.19.255.255", CRIER_TARGET_PRIVATE},
        /* IPv4 link-local, the cloud metadata address among them. */
        {"169.254.169.254", CRIER_TARGET_LINK_LOCAL},
        {"169.254.0.0", CRIER_TARGET_LINK_LOCAL},
        {"169.254.255.255", CRIER_TARGET_LINK_LOCAL},
        /* IPv4 special-purpose. */
        {"0.0.0.0", CRIER_TARGET_SPECIAL},
        {"0.1.2.3", CRIER_TARGET_SPECIAL},
        {"0.255.255.255", CRIER_TARGET_SPECIAL},
        {"224.0.0.1", CRIER_TARGET_SPECIAL},
        {"239.255.255.250", CRIER_TARGET_SPECIAL},
        {"240.0.0.1", CRIER_TARGET_SPECIAL},
        {"255.255.255.254", CRIER_TARGET_SPECIAL},
        {"255.255.255.255", CRIER_TARGET_SPECIAL},
        {"192.0.0.8", CRIER_TARGET_SPECIAL},
        {"192.0.2.1", CRIER_TARGET_SPECIAL},
        {"198.51.100.7", CRIER_TARGET_SPECIAL},
        {"203.0.113.9", CRIER_TARGET_SPECIAL},
        /* IPv6. */
        {"2606:4700:4700::1111", CRIER_TARGET_PUBLIC},
        {"2001:4860:4860::8888", CRIER_TARGET_PUBLIC},
        {"2a00:1450:4001::200e", CRIER_TARGET_PUBLIC},
        {"fbff:ffff::1", CRIER_TARGET_PUBLIC},
        {"fe7f::1", CRIER_TARGET_PUBLIC},
        {"::2:0:0:1", CRIER_TARGET_PUBLIC}, /* outside ::/96 */
        {"2001:db9::1", CRIER_TARGET_PUBLIC},
        {"::1", CRIER_TARGET_LOOPBACK},
        {"fc00::1", CRIER_TARGET_PRIVATE},
        {"fd12:3456:789a::1", CRIER_TARGET_PRIVATE},
        {"fd00:ec2::254", CRIER_TARGET_PRIVATE}, /* AWS IPv6 metadata */
        {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", CRIER_TARGET_PRIVATE},
        {"fec0::1", CRIER_TARGET_PRIVATE},
        {"fe80::1", CRIER_TARGET_LINK_LOCAL},
        {"fe80::a00:27ff:fe4e:66a1", CRIER_TARGET_LINK_LOCAL},
        {"febf:ffff::1", CRIER_TARGET_LINK_LOCAL},
        {"::", CRIER_TARGET_SPECIAL},
        {"::2", CRIER_TARGET_SPECIAL},
        {"::127.0.0.1", CRIER_TARGET_SPECIAL}, /* deprecated IPv4-compatible */
        {"::8.8.8.8", CRIER_TARGET_SPECIAL},
        {"ff02::1", CRIER_TARGET_SPECIAL},
        {"ff05::1:3", CRIER_TARGET_SPECIAL},
        {"100::1", CRIER_TARGET_SPECIAL},
        {"2001:db8::1", CRIER_TARGET_SPECIAL},
        /* IPv4-mapped and NAT64: the embedded IPv4 address decides. */
        {"::ffff:127.0.0.1", CRIER_TARGET_LOOPBACK},
        {"::ffff:7f00:2", CRIER_TARGET_LOOPBACK},
        {"::ffff:10.1.2.3", CRIER_TARGET_PRIVATE},
        {"::ffff:192.168.1.1", CRIER_TARGET_PRIVATE},
        {"::ffff:169.254.169.254", CRIER_TARGET_LINK_LOCAL},
        {"::ffff:0.0.0.0", CRIER_TARGET_SPECIAL},
        {"::ffff:255.255.255.255", CRIER_TARGET_SPECIAL},
        {"::ffff:8.8.8.8", CRIER_TARGET_PUBLIC},
        {"64:ff9b::127.0.0.1", CRIER_TARGET_LOOPBACK},
        {"64:ff9b::169.254.169.254", CRIER_TARGET_LINK_LOCAL},
        {"64:ff9b::8.8.8.8", CRIER_TARGET_PUBLIC},
        {"::fffe:127.0.0.1", CRIER_TARGET_PUBLIC}, /* not the mapped prefix */
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        crier_target_class got = classify(cases[i].addr);
        if (got != cases[i].cls) {
            fprintf(stderr, "classify %s: got %s, want %s\n", cases[i].addr,
                    crier_target_class_name(got), crier_target_class_name(cases[i].cls));
            check_failures++;
        }
    }
}

static void test_classify_odd_input(void)
{
    struct sockaddr_storage ss;
    struct sockaddr_un un;
    socklen_t len = make_addr("8.8.8.8", &ss);

    CHECK(crier_target_classify(NULL, 0) == CRIER_TARGET_SPECIAL);
    CHECK(crier_target_classify((struct sockaddr *)&ss, len) == CRIER_TARGET_PUBLIC);
    /* Truncated addresses are never trusted. */
    CHECK(crier_target_classify((struct sockaddr *)&ss, len - 1) == CRIER_TARGET_SPECIAL);
    CHECK(crier_target_classify((struct sockaddr *)&ss, 1) == CRIER_TARGET_SPECIAL);
    len = make_addr("2606:4700:4700::1111", &ss);
    CHECK(crier_target_classify((struct sockaddr *)&ss, len) == CRIER_TARGET_PUBLIC);
    CHECK(crier_target_classify((struct sockaddr *)&ss, sizeof(struct sockaddr_in)) ==
          CRIER_TARGET_SPECIAL);
    /* Other families. */
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    strcpy(un.sun_path, "/tmp/x");
    CHECK(crier_target_classify((struct sockaddr *)&un, sizeof un) == CRIER_TARGET_SPECIAL);

    CHECK_STR(crier_target_class_name(CRIER_TARGET_PUBLIC), "public");
    CHECK_STR(crier_target_class_name(CRIER_TARGET_LOOPBACK), "loopback");
    CHECK_STR(crier_target_class_name(CRIER_TARGET_PRIVATE), "private");
    CHECK_STR(crier_target_class_name(CRIER_TARGET_LINK_LOCAL), "link-local");
    CHECK_STR(crier_target_class_name(CRIER_TARGET_SPECIAL), "special-purpose");
}

static void test_allowed(void)
{
    static const struct {
        crier_target_class cls;
        unsigned allow;
        bool want;
    } cases[] = {
        {CRIER_TARGET_PUBLIC, 0, true},
        {CRIER_TARGET_PUBLIC, 7, true},
        {CRIER_TARGET_LOOPBACK, 0, false},
        {CRIER_TARGET_LOOPBACK, CRIER_TARGET_ALLOW_LOOPBACK, true},
        {CRIER_TARGET_LOOPBACK, CRIER_TARGET_ALLOW_PRIVATE | CRIER_TARGET_ALLOW_LINK_LOCAL, false},
        {CRIER_TARGET_PRIVATE, 0, false},
        {CRIER_TARGET_PRIVATE, CRIER_TARGET_ALLOW_PRIVATE, true},
        {CRIER_TARGET_PRIVATE, CRIER_TARGET_ALLOW_LOOPBACK | CRIER_TARGET_ALLOW_LINK_LOCAL, false},
        {CRIER_TARGET_LINK_LOCAL, 0, false},
        {CRIER_TARGET_LINK_LOCAL, CRIER_TARGET_ALLOW_LINK_LOCAL, true},
        {CRIER_TARGET_LINK_LOCAL, CRIER_TARGET_ALLOW_LOOPBACK | CRIER_TARGET_ALLOW_PRIVATE, false},
        {CRIER_TARGET_SPECIAL, 0, false},
        {CRIER_TARGET_SPECIAL, 7, false},
        {CRIER_TARGET_SPECIAL, ~0u, false},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (crier_target_allowed(cases[i].cls, cases[i].allow) != cases[i].want) {
            fprintf(stderr, "allowed(%s, %u) != %d\n", crier_target_class_name(cases[i].cls),
                    cases[i].allow, cases[i].want);
            check_failures++;
        }
    }
}

static void test_check_messages(void)
{
    static const struct {
        const char *addr;
        unsigned allow;
        int rc;
        const char *msg;
    } cases[] = {
        {"127.0.0.1", 0, -1, "127.0.0.1 is a loopback address; allow it with --allow-targets loopback"},
        {"::1", CRIER_TARGET_ALLOW_PRIVATE, -1, "::1 is a loopback address; allow it with --allow-targets loopback"},
        {"::ffff:127.0.0.1", 0, -1,
         "::ffff:127.0.0.1 is a loopback address; allow it with --allow-targets loopback"},
        {"10.0.0.5", CRIER_TARGET_ALLOW_LOOPBACK, -1,
         "10.0.0.5 is a private address; allow it with --allow-targets private"},
        {"169.254.169.254", CRIER_TARGET_ALLOW_LOOPBACK | CRIER_TARGET_ALLOW_PRIVATE, -1,
         "169.254.169.254 is a link-local address; allow it with --allow-targets link-local"},
        {"fe80::1", 0, -1, "fe80::1 is a link-local address; allow it with --allow-targets link-local"},
        {"0.0.0.0", 7, -1, "0.0.0.0 is a special-purpose address, never allowed"},
        {"ff02::1", 7, -1, "ff02::1 is a special-purpose address, never allowed"},
        {"127.0.0.1", CRIER_TARGET_ALLOW_LOOPBACK, 0, ""},
        {"192.168.1.10", CRIER_TARGET_ALLOW_PRIVATE, 0, ""},
        {"169.254.169.254", CRIER_TARGET_ALLOW_LINK_LOCAL, 0, ""},
        {"8.8.8.8", 0, 0, ""},
        {"2606:4700:4700::1111", 0, 0, ""},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sockaddr_storage ss;
        socklen_t len = make_addr(cases[i].addr, &ss);
        char err[CRIER_TARGET_ERROR_LEN] = "";
        int rc = crier_target_check((struct sockaddr *)&ss, len, cases[i].allow, err, sizeof err);

        if (rc != cases[i].rc || strcmp(err, cases[i].msg) != 0) {
            fprintf(stderr, "check %s allow %u: rc %d \"%s\", want %d \"%s\"\n", cases[i].addr,
                    cases[i].allow, rc, err, cases[i].rc, cases[i].msg);
            check_failures++;
        }
    }
    /* The longest address still fits the documented buffer. */
    {
        struct sockaddr_storage ss;
        socklen_t len = make_addr("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", &ss);
        char err[CRIER_TARGET_ERROR_LEN];

        CHECK(crier_target_check((struct sockaddr *)&ss, len, 0, err, sizeof err) == -1);
        CHECK(strstr(err, "never allowed") != NULL);
        /* NULL / zero-size buffers are fine. */
        CHECK(crier_target_check((struct sockaddr *)&ss, len, 0, NULL, 0) == -1);
    }
    {
        struct sockaddr_un un;
        char err[CRIER_TARGET_ERROR_LEN];

        memset(&un, 0, sizeof un);
        un.sun_family = AF_UNIX;
        CHECK(crier_target_check((struct sockaddr *)&un, sizeof un, 7, err, sizeof err) == -1);
        CHECK(strstr(err, "non-IP address") != NULL);
    }
}

static void test_parse_allow(void)
{
    static const struct {
        const char *list;
        unsigned want;
    } good[] = {
        {"none", 0},
        {"NONE", 0},
        {"loopback", CRIER_TARGET_ALLOW_LOOPBACK},
        {"private", CRIER_TARGET_ALLOW_PRIVATE},
        {"link-local", CRIER_TARGET_ALLOW_LINK_LOCAL},
        {"loopback,private,link-local", 7},
        {"link-local,loopback", CRIER_TARGET_ALLOW_LOOPBACK | CRIER_TARGET_ALLOW_LINK_LOCAL},
        {" loopback , Private ", CRIER_TARGET_ALLOW_LOOPBACK | CRIER_TARGET_ALLOW_PRIVATE},
        {"private,private", CRIER_TARGET_ALLOW_PRIVATE},
        {"none,none", 0},
    };
    static const struct {
        const char *list;
        const char *msg_part;
    } bad[] = {
        {"", "empty word"},
        {"  ", "empty word"},
        {"loopback,", "empty word"},
        {",private", "empty word"},
        {"loopback,,private", "empty word"},
        {"local", "unknown word \"local\""},
        {"loopback,publik", "unknown word \"publik\""},
        {"link_local", "unknown word \"link_local\""},
        {"all", "unknown word \"all\""},
        {"loopback private", "unknown word \"loopback private\""},
        {"none,loopback", "\"none\" cannot be combined"},
        {"private,none", "\"none\" cannot be combined"},
    };
    size_t i;

    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        unsigned mask = 99;
        char err[256] = "";

        if (crier_target_parse_allow(good[i].list, &mask, err, sizeof err) != 0 || mask != good[i].want) {
            fprintf(stderr, "parse \"%s\": mask %u err \"%s\", want %u\n", good[i].list, mask, err,
                    good[i].want);
            check_failures++;
        }
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned mask = 99;
        char err[256] = "";
        int rc = crier_target_parse_allow(bad[i].list, &mask, err, sizeof err);

        if (rc != -1 || mask != 99 || !strstr(err, bad[i].msg_part) ||
            (!strstr(err, "\"none\" cannot") && !strstr(err, "accepted words: " CRIER_TARGET_ALLOW_WORDS))) {
            fprintf(stderr, "parse \"%s\": rc %d mask %u err \"%s\", want an error with \"%s\"\n",
                    bad[i].list, rc, mask, err, bad[i].msg_part);
            check_failures++;
        }
    }
    {
        unsigned mask = 5;
        char err[256];
        CHECK(crier_target_parse_allow(NULL, &mask, err, sizeof err) == -1 && mask == 5);
        CHECK(crier_target_parse_allow("loopback", NULL, err, sizeof err) == -1);
        /* A bad word of any length gives a bounded message. */
        char longword[400];
        memset(longword, 'x', sizeof longword - 1);
        longword[sizeof longword - 1] = '\0';
        CHECK(crier_target_parse_allow(longword, &mask, err, sizeof err) == -1 && mask == 5);
        CHECK(strstr(err, "accepted words") != NULL);
        CHECK(crier_target_parse_allow("loopback", &mask, NULL, 0) == 0 && mask == 1);
    }
}

static void test_format_allow(void)
{
    char out[32];
    unsigned m, back;

    for (m = 0; m < 8; m++) {
        CHECK(crier_target_format_allow(m, out, sizeof out) == 0);
        CHECK(crier_target_parse_allow(out, &back, NULL, 0) == 0 && back == m);
    }
    CHECK(crier_target_format_allow(0, out, sizeof out) == 0);
    CHECK_STR(out, "none");
    CHECK(crier_target_format_allow(7, out, sizeof out) == 0);
    CHECK_STR(out, "loopback,private,link-local");
    CHECK(crier_target_format_allow(CRIER_TARGET_ALLOW_PRIVATE | CRIER_TARGET_ALLOW_LINK_LOCAL, out,
                                    sizeof out) == 0);
    CHECK_STR(out, "private,link-local");
    CHECK(crier_target_format_allow(7, out, 10) == -1);
    CHECK(crier_target_format_allow(0, out, 4) == -1);
    CHECK(crier_target_format_allow(0, NULL, 0) == -1);
}

int main(void)
{
    test_classify();
    test_classify_odd_input();
    test_allowed();
    test_check_messages();
    test_parse_allow();
    test_format_allow();
    return CHECK_DONE();
}
