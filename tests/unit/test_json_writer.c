/* test_json_writer.c — the JSON writer of the base layer: appends, long
 * formatted text, JSON string escaping (control characters, quotes, valid and
 * invalid UTF-8) and Prometheus label values. */
#include "check.h"
#include "json_writer.h"

/* s written as a JSON string, in a buffer of its own (static: one at a time). */
static const char *quoted(const char *s)
{
    static crier_json_buf b;
    crier_json_buf_free(&b);
    crier_json_buf_string(&b, s);
    return b.data;
}

int main(void)
{
    crier_json_buf b = {0};
    char big[1000];

    crier_json_buf_add(&b, "ab", 1);
    crier_json_buf_puts(&b, "{}");
    crier_json_buf_printf(&b, "[%d,%s]", 7, "x");
    CHECK_STR(b.data, "a{}[7,x]");
    CHECK(b.len == 8);
    crier_json_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);

    /* formatted text longer than the writer's stack buffer */
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    crier_json_buf_printf(&b, "<%s>", big);
    CHECK(b.len == sizeof big + 1 && b.data[0] == '<' && b.data[b.len - 1] == '>');
    CHECK(b.data[b.len] == '\0');
    crier_json_buf_free(&b);

    CHECK_STR(quoted(NULL), "null");
    CHECK_STR(quoted(""), "\"\"");
    CHECK_STR(quoted("plain text"), "\"plain text\"");
    CHECK_STR(quoted("say \"hi\" \\ bye"), "\"say \\\"hi\\\" \\\\ bye\"");
    CHECK_STR(quoted("a\nb\rc\td\x01"
                     "e\x1f"),
              "\"a\\nb\\rc\\td\\u0001e\\u001f\"");
    /* valid UTF-8 is kept: 2, 3 and 4 byte sequences */
    CHECK_STR(quoted("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
              "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* invalid UTF-8 becomes U+FFFD, one per bad byte: a stray continuation
     * byte, 0xff, an overlong form, a surrogate, a truncated sequence */
    CHECK_STR(quoted("a\x80z"), "\"a\xef\xbf\xbdz\"");
    CHECK_STR(quoted("\xff"), "\"\xef\xbf\xbd\"");
    CHECK_STR(quoted("\xc0\xaf"), "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK_STR(quoted("\xed\xa0\x80"), "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK_STR(quoted("x\xe2\x82"), "\"x\xef\xbf\xbd\xef\xbf\xbd\"");
    quoted(""); /* frees the previous result */

    crier_json_buf_prometheus_label(&b, "a\\b\"c\nd");
    crier_json_buf_prometheus_label(&b, NULL);
    CHECK_STR(b.data, "\"a\\\\b\\\"c\\nd\"\"\"");
    crier_json_buf_free(&b);
    return CHECK_DONE();
}
