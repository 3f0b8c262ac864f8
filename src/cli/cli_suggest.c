/* cli_suggest.c — the CLI's answer to a mistyped word: the error, the nearest
 * option or command ("did you mean --batch-size?") and one line pointing at
 * --help, instead of the whole help (see cli.h). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#define SUGGEST_MAX_LEN 64

/* The optimal string alignment distance between a and b (insertions,
 * deletions, substitutions and swaps of neighbours each count 1), or
 * SUGGEST_MAX_LEN when either is longer than that. */
static size_t suggest_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];

    if (la > SUGGEST_MAX_LEN || lb > SUGGEST_MAX_LEN)
        return SUGGEST_MAX_LEN;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

const char *crier_cli_nearest(const char *given, const char *const *names, size_t n)
{
    size_t len = strlen(given), best = SUGGEST_MAX_LEN, limit;
    const char *found = NULL;

    if (len == 0)
        return NULL;
    /* a slip of one key in a short word, two or three in a longer one */
    limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    for (size_t i = 0; i < n; i++) {
        size_t d = suggest_distance(given, names[i]);
        if (d < best) {
            best = d;
            found = names[i];
        }
    }
    return best <= limit ? found : NULL;
}

/* The name of a command-line word that looks like an option: "--bach-size=3"
 * gives "bach-size", "-x" gives "x". */
static void suggest_option_name(const char *word, char *out, size_t len)
{
    size_t n;
    word += strspn(word, "-");
    n = strcspn(word, "=");
    if (n >= len)
        n = len - 1;
    memcpy(out, word, n);
    out[n] = '\0';
}

void crier_cli_unknown_option(const char *cmd, const char *word, const struct option *options)
{
    const char *names[128], *prefixed[8];
    char name[SUGGEST_MAX_LEN + 1];
    size_t n = 0, n_prefixed = 0;
    const char *nearest;

    suggest_option_name(word, name, sizeof name);
    for (const struct option *o = options; o->name && n < sizeof names / sizeof names[0]; o++) {
        names[n++] = o->name;
        /* getopt_long takes a unique abbreviation: a shared one is ambiguous */
        if (name[0] && !strncmp(o->name, name, strlen(name)) &&
            n_prefixed < sizeof prefixed / sizeof prefixed[0])
            prefixed[n_prefixed++] = o->name;
    }
    if (n_prefixed > 1) {
        fprintf(stderr, "crier %s: option '%s' is ambiguous\ndid you mean", cmd, word);
        for (size_t i = 0; i < n_prefixed; i++)
            fprintf(stderr, "%s --%s",
                    i == 0                ? ""
                    : i + 1 == n_prefixed ? " or"
                                          : ",",
                    prefixed[i]);
        fputs("?\n", stderr);
    } else {
        fprintf(stderr, "crier %s: unknown option '%s'\n", cmd, word);
        nearest = crier_cli_nearest(name, names, n);
        if (nearest)
            fprintf(stderr, "did you mean --%s?\n", nearest);
    }
    fprintf(stderr, "crier %s --help lists the options\n", cmd);
}
