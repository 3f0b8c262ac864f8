/* test_install_paths.c — unit test of install_paths.c on directory trees made
 * in a temp dir: an installed layout (prefix/bin/crier beside
 * prefix/share/crier/lua) is found from the binary's path, a binary in its
 * build directory falls back to the source tree, the installed layout wins
 * over the source tree, and a binary anywhere else finds nothing (and is told
 * where the installed layout would be). Exits 1 on any failure. */
#include "check.h"
#include "install_paths.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[4096];

/* Creates root/rel and its parents (rel ends in a directory). */
static void make_dirs(const char *rel)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    mkdir(path, 0755);
}

/* root/rel as an absolute path, in a static buffer of one of 4 slots. */
static const char *at(const char *rel)
{
    static char bufs[4][8192];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", root, rel);
    return b;
}

/* Creates the empty file root/rel (its directory must exist). */
static void touch(const char *rel)
{
    int fd = open(at(rel), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
        perror(rel);
        exit(1);
    }
    close(fd);
}

/* Finds the files of the binary root/exe, built in root/src/build from root/src. */
static void find(const char *exe, crier_install_paths *p)
{
    crier_install_paths_find(at(exe), "../share/crier", at("src/build"), at("src"), p);
}

static void test_installed(void)
{
    crier_install_paths p;
    make_dirs("usr/bin");
    make_dirs("usr/share/crier/lua/crier");
    make_dirs("usr/share/crier/examples/rules");
    touch("usr/bin/crier");
    touch("usr/share/crier/lua/crier/init.lua");

    /* no build or source directory known: the installed layout only */
    crier_install_paths_find(at("usr/bin/crier"), "../share/crier", NULL, NULL, &p);
    CHECK(p.origin == CRIER_PATHS_INSTALLED);
    CHECK_STR(p.lua_dir, at("usr/share/crier/lua"));
    CHECK_STR(p.examples_dir, at("usr/share/crier/examples"));
}

static void test_build_tree(void)
{
    crier_install_paths p;
    make_dirs("src/lua/crier");
    make_dirs("src/examples/rules");
    make_dirs("src/build");
    touch("src/lua/crier/init.lua");
    touch("src/build/crier");

    /* a binary in its build directory uses the source tree it was built from */
    find("src/build/crier", &p);
    CHECK(p.origin == CRIER_PATHS_SOURCE_TREE);
    CHECK_STR(p.lua_dir, at("src/lua"));
    CHECK_STR(p.examples_dir, at("src/examples"));

    /* the installed binary of that build does not, wherever the source tree is */
    find("usr/bin/crier", &p);
    CHECK(p.origin == CRIER_PATHS_INSTALLED);
    CHECK_STR(p.lua_dir, at("usr/share/crier/lua"));
}

static void test_elsewhere(void)
{
    crier_install_paths p;
    make_dirs("opt/tools");
    touch("opt/tools/crier");

    /* a copy outside the build directory, with no installed layout beside it */
    find("opt/tools/crier", &p);
    CHECK(p.origin == CRIER_PATHS_NONE);
    CHECK_STR(p.lua_dir, at("opt/share/crier/lua")); /* tidied, though it does not exist */

    /* an installed layout inside a build directory wins over the source tree */
    make_dirs("src/share/crier/lua/crier");
    touch("src/share/crier/lua/crier/init.lua");
    find("src/build/crier", &p);
    CHECK(p.origin == CRIER_PATHS_INSTALLED);
    CHECK_STR(p.lua_dir, at("src/share/crier/lua"));
}

static void test_self(void)
{
    char exe[4096], err[256] = "";
    CHECK(crier_install_paths_self(exe, sizeof exe, err, sizeof err) == 0);
    CHECK(strstr(exe, "test_install_paths") != NULL);
    CHECK(crier_install_paths_self(exe, 4, err, sizeof err) == -1);
    CHECK(strstr(err, "/proc/self/exe") != NULL);
}

int main(void)
{
    const char *base = getenv("CRIER_TEST_DIR");
    char tmpl[4000];
    char cmd[8300];
    int rc;

    snprintf(tmpl, sizeof tmpl, "%s/install-paths-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl)) {
        snprintf(tmpl, sizeof tmpl,
                 "/tmp/install-paths-XXXXXX"); /* CRIER_TEST_DIR may not exist yet */
        if (!mkdtemp(tmpl)) {
            perror("mkdtemp");
            return 1;
        }
    }
    /* resolved, as the paths the module writes are */
    if (!realpath(tmpl, root)) {
        perror(tmpl);
        return 1;
    }
    test_installed();
    test_build_tree();
    test_elsewhere();
    test_self();
    rc = CHECK_DONE();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return rc;
}
