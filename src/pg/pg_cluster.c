/* pg_cluster.c — runs a private PostgreSQL cluster under a data directory (see
 * pg_cluster.h): finds the server binaries, runs initdb on first use, writes the
 * settings crier needs (unix socket only, no TCP) into an included crier.conf,
 * starts and stops the server with pg_ctl. As root, the server binaries run as
 * the "postgres" user (or "nobody"), since PostgreSQL refuses to run as root.
 *
 * Children are started with fork + execv and an argument vector (no shell): data
 * directory paths may hold spaces or single quotes. pg_ctl itself passes the data
 * directory through /bin/sh inside double quotes, so paths holding " \ $ or `
 * are refused with a clear message. */
#define _GNU_SOURCE
#include "pg_cluster.h"

#include "log.h"
#include "proc_stat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <locale.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PGC_MODULE "pg_cluster"
#define PGC_PORT 5432
#define PGC_SUPERUSER "crier"
#define PGC_SOCKET_NAME "/.s.PGSQL.5432"
#define PGC_CONF_NAME "crier.conf"
#define PGC_INCLUDE_LINE "include = 'crier.conf'"
#define PGC_LOG_NAME "server.log"
#define PGC_LOG_TAIL_LINES 20
#define PGC_OUT_TAIL 4096
#define PGC_MAX_GROUPS 64
#define PGC_START_ATTEMPTS 30 /* 300 ms apart: rides out a killed server's leftovers */
#define PGC_NOT_FOUND_MSG                                                                          \
    "PostgreSQL server binaries not found: install the postgresql package "                        \
    "(scripts/install-deps) or set CRIER_PG_BINDIR"

/* Paths of the two server programs crier runs. */
typedef struct {
    char initdb[PATH_MAX];
    char pg_ctl[PATH_MAX];
} pgc_bins;

/* Who the server programs run as: ourselves, or (when we are root) an
 * unprivileged user whose ids the child switches to before exec. */
typedef struct {
    bool switch_user;
    uid_t uid;
    gid_t gid;
    char name[64];
    gid_t groups[PGC_MAX_GROUPS];
    int ngroups;
} pgc_user;

/* The resolved data directory and the directory of its unix socket. */
typedef struct {
    char datadir[PATH_MAX];
    char sockdir[PATH_MAX];
    bool sock_fallback; /* sockdir is the short directory under /tmp */
} pgc_paths;

/* The last bytes a child wrote on stdout/stderr (earlier output is dropped). */
typedef struct {
    char buf[PGC_OUT_TAIL];
    size_t len;
} pgc_output;

/* ---- error text ---------------------------------------------------------- */

static void err_vappend(char *err, size_t err_len, const char *fmt, va_list ap)
{
    size_t used;

    if (!err || err_len == 0)
        return;
    used = strnlen(err, err_len);
    if (used >= err_len - 1)
        return;
    vsnprintf(err + used, err_len - used, fmt, ap);
}

static void __attribute__((format(printf, 3, 4)))
err_set(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (!err || err_len == 0)
        return;
    err[0] = '\0';
    va_start(ap, fmt);
    err_vappend(err, err_len, fmt, ap);
    va_end(ap);
}

static void __attribute__((format(printf, 3, 4)))
err_append(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_vappend(err, err_len, fmt, ap);
    va_end(ap);
}

/* Appends a child's captured output (trimmed of trailing newlines), if any. */
static void err_append_output(char *err, size_t err_len, const char *what, const pgc_output *out)
{
    size_t n = out->len;

    while (n > 0 && (out->buf[n - 1] == '\n' || out->buf[n - 1] == '\r'))
        n--;
    if (n == 0)
        return;
    err_append(err, err_len, "\n--- %s output ---\n%.*s", what, (int)n, out->buf);
}

/* Appends the last PGC_LOG_TAIL_LINES lines of the server log, if readable. */
static void err_append_log_tail(char *err, size_t err_len, const char *datadir)
{
    char path[PATH_MAX + 32];
    char buf[8192];
    const char *start;
    ssize_t n;
    off_t size;
    int fd = -1;
    int lines = 0;

    snprintf(path, sizeof path, "%s/%s", datadir, PGC_LOG_NAME);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size = lseek(fd, 0, SEEK_END);
    if (size < 0)
        goto out;
    if (lseek(fd, size > (off_t)(sizeof buf - 1) ? size - (off_t)(sizeof buf - 1) : 0, SEEK_SET) <
        0)
        goto out;
    n = read(fd, buf, sizeof buf - 1);
    if (n <= 0)
        goto out;
    while (n > 0 && buf[n - 1] == '\n')
        n--;
    buf[n] = '\0';
    start = buf + n;
    while (start > buf) {
        if (start[-1] == '\n' && ++lines == PGC_LOG_TAIL_LINES)
            break;
        start--;
    }
    err_append(err, err_len, "\n--- last lines of %s ---\n%s", path, start);
out:
    if (fd >= 0)
        close(fd);
}

static void output_add(pgc_output *out, const char *data, size_t n)
{
    size_t cap = sizeof out->buf - 1;

    if (n > cap) {
        data += n - cap;
        n = cap;
    }
    if (out->len + n > cap) {
        size_t drop = out->len + n - cap;
        memmove(out->buf, out->buf + drop, out->len - drop);
        out->len -= drop;
    }
    memcpy(out->buf + out->len, data, n);
    out->len += n;
    out->buf[out->len] = '\0';
}

/* ---- finding the binaries ------------------------------------------------ */

static bool is_executable(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Fills bins from directory dir; true if both programs are there. */
static bool bins_from_dir(const char *dir, pgc_bins *bins)
{
    int a = snprintf(bins->initdb, sizeof bins->initdb, "%s/initdb", dir);
    int b = snprintf(bins->pg_ctl, sizeof bins->pg_ctl, "%s/pg_ctl", dir);

    if (a < 0 || b < 0 || (size_t)a >= sizeof bins->initdb || (size_t)b >= sizeof bins->pg_ctl)
        return false;
    return is_executable(bins->initdb) && is_executable(bins->pg_ctl);
}

/* Looks up program name in $PATH; writes its path to out. */
static bool find_on_path(const char *name, char *out, size_t out_len)
{
    const char *path = getenv("PATH");
    const char *p;

    if (!path || !*path)
        return false;
    for (p = path;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int n;

        if (len == 0)
            n = snprintf(out, out_len, "./%s", name);
        else
            n = snprintf(out, out_len, "%.*s/%s", (int)len, p, name);
        if (n > 0 && (size_t)n < out_len && is_executable(out))
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* CRIER_PG_BINDIR; else the highest /usr/lib/postgresql/<version>/bin with
 * initdb; else initdb and pg_ctl on PATH. */
static int find_bins(pgc_bins *bins, char *err, size_t err_len)
{
    const char *env = getenv("CRIER_PG_BINDIR");
    char best[64] = "";
    char dir[PATH_MAX];
    struct dirent *de;
    DIR *d;

    if (env && *env) {
        if (bins_from_dir(env, bins))
            return 0;
        err_set(err, err_len, "%s (CRIER_PG_BINDIR=%s holds no executable initdb and pg_ctl)",
                PGC_NOT_FOUND_MSG, env);
        return -1;
    }
    d = opendir("/usr/lib/postgresql");
    if (d) {
        while ((de = readdir(d)) != NULL) {
            char candidate[PATH_MAX];

            if (de->d_name[0] < '0' || de->d_name[0] > '9' || strlen(de->d_name) >= sizeof best)
                continue;
            snprintf(candidate, sizeof candidate, "/usr/lib/postgresql/%s/bin/initdb", de->d_name);
            if (!is_executable(candidate))
                continue;
            if (!best[0] || strverscmp(de->d_name, best) > 0)
                memcpy(best, de->d_name, strlen(de->d_name) + 1);
        }
        closedir(d);
        if (best[0]) {
            snprintf(dir, sizeof dir, "/usr/lib/postgresql/%s/bin", best);
            if (bins_from_dir(dir, bins))
                return 0;
        }
    }
    if (find_on_path("initdb", bins->initdb, sizeof bins->initdb) &&
        find_on_path("pg_ctl", bins->pg_ctl, sizeof bins->pg_ctl))
        return 0;
    err_set(err, err_len, "%s", PGC_NOT_FOUND_MSG);
    return -1;
}

/* ---- the server user ----------------------------------------------------- */

static int resolve_user(pgc_user *u, char *err, size_t err_len)
{
    static const char *const names[] = {"postgres", "nobody"};
    struct passwd pw, *res = NULL;
    char buf[4096];

    memset(u, 0, sizeof *u);
    if (geteuid() != 0) {
        u->uid = geteuid();
        u->gid = getegid();
        if (getpwuid_r(u->uid, &pw, buf, sizeof buf, &res) == 0 && res)
            snprintf(u->name, sizeof u->name, "%s", res->pw_name);
        else
            snprintf(u->name, sizeof u->name, "uid %d", (int)u->uid);
        return 0;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (getpwnam_r(names[i], &pw, buf, sizeof buf, &res) == 0 && res)
            break;
        res = NULL;
    }
    if (!res || res->pw_uid == 0) {
        err_set(
            err, err_len,
            "running as root, but no unprivileged user (postgres or nobody) exists to run the "
            "PostgreSQL server as: install the postgresql package (scripts/install-deps) or run "
            "crier as an ordinary user");
        return -1;
    }
    u->switch_user = true;
    u->uid = res->pw_uid;
    u->gid = res->pw_gid;
    snprintf(u->name, sizeof u->name, "%s", res->pw_name);
    u->ngroups = PGC_MAX_GROUPS;
    if (getgrouplist(res->pw_name, res->pw_gid, u->groups, &u->ngroups) < 0) {
        /* More groups than we keep: the primary group is enough for the server. */
        u->groups[0] = res->pw_gid;
        u->ngroups = 1;
    }
    return 0;
}

static bool user_in_group(const pgc_user *u, gid_t gid)
{
    if (u->gid == gid)
        return true;
    for (int i = 0; i < u->ngroups; i++)
        if (u->groups[i] == gid)
            return true;
    return false;
}

/* Whether u may enter (search) the directory described by st. */
static bool user_can_search(const pgc_user *u, const struct stat *st)
{
    if (st->st_uid == u->uid)
        return (st->st_mode & S_IXUSR) != 0;
    if (user_in_group(u, st->st_gid))
        return (st->st_mode & S_IXGRP) != 0;
    return (st->st_mode & S_IXOTH) != 0;
}

/* ---- running children ---------------------------------------------------- */

/* In the forked child: wire stdio, drop privileges, exec. Only async-signal-safe
 * calls from here on (the parent may have threads). */
static void __attribute__((noreturn))
child_exec(const pgc_user *u, char *const argv[], int out_fd, int null_fd)
{
    static const int sigs[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,
                               SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
    static const char msg_ids[] = "crier: cannot switch to the server user\n";
    static const char msg_exec[] = "crier: cannot execute ";
    struct sigaction sa;
    sigset_t none;
    int o, z;

    /* Move both fds above stdio first, so the dup2s below cannot clobber them. */
    o = fcntl(out_fd, F_DUPFD, 3);
    z = fcntl(null_fd, F_DUPFD, 3);
    if (o < 0 || z < 0 || dup2(z, 0) < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0)
        _exit(126);
    close_range(3, ~0U, 0);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    if (chdir("/") < 0)
        _exit(126);
    if (u->switch_user) {
        if (setgroups((size_t)u->ngroups, u->groups) < 0 || setgid(u->gid) < 0 ||
            setuid(u->uid) < 0 || getuid() != u->uid || geteuid() != u->uid) {
            (void)!write(2, msg_ids, sizeof msg_ids - 1);
            _exit(126);
        }
    }
    execv(argv[0], argv);
    (void)!write(2, msg_exec, sizeof msg_exec - 1);
    (void)!write(2, argv[0], strlen(argv[0]));
    (void)!write(2, "\n", 1);
    _exit(127);
}

/* Runs argv[0] with argv as u, capturing stdout+stderr into out. Returns the exit
 * status (128 + signal if killed), or -1 with err set if it could not be run. */
static int run_child(const pgc_user *u, char *const argv[], pgc_output *out, char *err,
                     size_t err_len)
{
    int pipefd[2] = {-1, -1};
    int null_fd = -1;
    int status = 0;
    int rc = -1;
    pid_t pid;
    char buf[1024];

    out->len = 0;
    out->buf[0] = '\0';
    null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0 || pipe2(pipefd, O_CLOEXEC) < 0) {
        err_set(err, err_len, "cannot run %s: %s", argv[0], strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        err_set(err, err_len, "cannot run %s: fork: %s", argv[0], strerror(errno));
        goto out;
    }
    if (pid == 0)
        child_exec(u, argv, pipefd[1], null_fd);
    close(pipefd[1]);
    pipefd[1] = -1;
    for (;;) {
        ssize_t n = read(pipefd[0], buf, sizeof buf);
        if (n > 0)
            output_add(out, buf, (size_t)n);
        else if (n == 0 || errno != EINTR)
            break;
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            err_set(err, err_len, "cannot wait for %s: %s", argv[0], strerror(errno));
            goto out;
        }
    }
    if (WIFEXITED(status))
        rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        rc = 128 + WTERMSIG(status);
    else
        rc = 255;
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (null_fd >= 0)
        close(null_fd);
    return rc;
}

/* pg_ctl -D datadir status: 0 running, 3 not running, 4 no accessible datadir;
 * -1 if pg_ctl could not be run. */
static int pg_ctl_status(const pgc_bins *bins, const pgc_user *u, const char *datadir,
                         pgc_output *out, char *err, size_t err_len)
{
    char *argv[] = {(char *)bins->pg_ctl, "-D", (char *)datadir, "status", NULL};

    return run_child(u, argv, out, err, err_len);
}

/* ---- paths --------------------------------------------------------------- */

/* pg_ctl builds a /bin/sh command line with the data directory inside double
 * quotes; refuse what the shell would interpret there. */
static bool path_is_shell_safe(const char *p)
{
    for (; *p; p++)
        if (*p == '"' || *p == '\\' || *p == '$' || *p == '`' || (unsigned char)*p < 0x20 ||
            *p == 0x7f)
            return false;
    return true;
}

/* Whether dir can be written literally as the unix_socket_directories value
 * (a comma-separated list whose elements are trimmed of white space). */
static bool path_is_guc_list_safe(const char *p)
{
    size_t n = strlen(p);

    if (n == 0 || p[n - 1] == ' ' || p[n - 1] == '\t')
        return false;
    for (; *p; p++)
        if (*p == ',' || *p == '\'' || *p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            return false;
    return true;
}

/* Makes path absolute (lexically: relative to the working directory). */
static int make_absolute(const char *path, char *out, size_t out_len, char *err, size_t err_len)
{
    char cwd[PATH_MAX];
    int n;

    if (path[0] == '/') {
        n = snprintf(out, out_len, "%s", path);
    } else {
        if (!getcwd(cwd, sizeof cwd)) {
            err_set(err, err_len, "cannot resolve data directory %s: getcwd: %s", path,
                    strerror(errno));
            return -1;
        }
        n = snprintf(out, out_len, "%s/%s", strcmp(cwd, "/") ? cwd : "", path);
    }
    if (n < 0 || (size_t)n >= out_len) {
        err_set(err, err_len, "data directory path too long: %s", path);
        return -1;
    }
    return 0;
}

/* mkdir -p: the last component gets mode 0700 (the data directory), the others
 * 0755. As root, parents we create are chmod'ed so that the server user can
 * traverse them whatever the umask. */
static int mkdir_p(const char *abs, bool as_root, char *err, size_t err_len)
{
    char path[PATH_MAX];
    size_t len = strlen(abs);
    struct stat st;

    if (len >= sizeof path) {
        err_set(err, err_len, "data directory path too long: %s", abs);
        return -1;
    }
    memcpy(path, abs, len + 1);
    for (char *p = path + 1;; p++) {
        bool last = (*p == '\0');

        if (*p != '/' && !last)
            continue;
        if (p[-1] != '/') {
            *p = '\0';
            if (mkdir(path, last ? 0700 : 0755) == 0) {
                if (as_root && !last)
                    chmod(path, 0755);
            } else if (errno != EEXIST) {
                err_set(err, err_len, "cannot create directory %s: %s", path, strerror(errno));
                return -1;
            }
            if (!last)
                *p = '/';
        }
        if (last)
            break;
    }
    if (stat(abs, &st) < 0 || !S_ISDIR(st.st_mode)) {
        err_set(err, err_len, "data directory %s exists but is not a directory", abs);
        return -1;
    }
    return 0;
}

/* FNV-1a 64: names the fallback socket directory (not a security property). */
static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 14695981039346656037ULL;

    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* Resolves datadir (which must exist) and derives the socket directory. */
static int resolve_paths(const char *datadir, pgc_paths *paths, char *err, size_t err_len)
{
    struct sockaddr_un sun;
    char abs[PATH_MAX];

    if (make_absolute(datadir, abs, sizeof abs, err, err_len) < 0)
        return -1;
    if (!realpath(abs, paths->datadir)) {
        err_set(err, err_len, "cannot resolve data directory %s: %s", abs, strerror(errno));
        return -1;
    }
    if (!path_is_shell_safe(paths->datadir)) {
        err_set(err, err_len,
                "data directory path %s contains a character pg_ctl cannot pass through its shell "
                "(\" \\ $ ` or a control character): choose another directory",
                paths->datadir);
        return -1;
    }
    if (strlen(paths->datadir) + strlen(PGC_SOCKET_NAME) < sizeof sun.sun_path &&
        path_is_guc_list_safe(paths->datadir)) {
        snprintf(paths->sockdir, sizeof paths->sockdir, "%s", paths->datadir);
        paths->sock_fallback = false;
    } else {
        snprintf(paths->sockdir, sizeof paths->sockdir, "/tmp/crier-pg-%016llx",
                 (unsigned long long)fnv1a64(paths->datadir));
        paths->sock_fallback = true;
    }
    return 0;
}

/* Writes the conninfo for paths. The host is single-quoted when libpq's conninfo
 * syntax needs it, with quotes and backslashes inside escaped by a backslash. */
static int format_conninfo(const pgc_paths *paths, char *conninfo, size_t conninfo_len, char *err,
                           size_t err_len)
{
    char host[2 * PATH_MAX + 3];
    const char *s = paths->sockdir;
    size_t o = 0;
    bool quote = (*s == '\0');
    int n;

    for (const char *p = s; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\'' || *p == '\\')
            quote = true;
    if (quote)
        host[o++] = '\'';
    for (const char *p = s; *p; p++) {
        if (quote && (*p == '\'' || *p == '\\'))
            host[o++] = '\\';
        host[o++] = *p;
    }
    if (quote)
        host[o++] = '\'';
    host[o] = '\0';
    n = snprintf(conninfo, conninfo_len, "host=%s port=%d user=%s dbname=postgres", host, PGC_PORT,
                 PGC_SUPERUSER);
    if (n < 0 || (size_t)n >= conninfo_len) {
        err_set(err, err_len, "connection string buffer too small (%d bytes needed)", n + 1);
        return -1;
    }
    return 0;
}

static bool has_pg_version(const char *datadir)
{
    char path[PATH_MAX + 16];

    snprintf(path, sizeof path, "%s/PG_VERSION", datadir);
    return access(path, F_OK) == 0;
}

/* Whether dir has no entries (an unreadable directory counts as not empty). */
static bool dir_is_empty(const char *dir)
{
    struct dirent *de;
    DIR *d = opendir(dir);
    bool empty = true;

    if (!d)
        return false;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            empty = false;
            break;
        }
    }
    closedir(d);
    return empty;
}

/* ---- preparing the data directory (root) --------------------------------- */

/* chown -R below the open directory dirfd (which this call consumes). */
static int chown_tree_fd(int dirfd, uid_t uid, gid_t gid, char *err, size_t err_len)
{
    struct dirent *de;
    DIR *d = fdopendir(dirfd);
    int rc = 0;

    if (!d) {
        err_set(err, err_len, "cannot read directory: %s", strerror(errno));
        close(dirfd);
        return -1;
    }
    while (rc == 0 && (de = readdir(d)) != NULL) {
        struct stat st;

        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* vanished */
        if ((st.st_uid != uid || st.st_gid != gid) &&
            fchownat(dirfd, de->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOENT) {
            err_set(err, err_len, "cannot chown %s: %s", de->d_name, strerror(errno));
            rc = -1;
        }
        if (rc == 0 && S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                rc = chown_tree_fd(sub, uid, gid, err, err_len);
        }
    }
    closedir(d);
    return rc;
}

/* Gives the data directory and everything in it to the server user. */
static int chown_datadir(const char *datadir, const pgc_user *u, char *err, size_t err_len)
{
    int fd = open(datadir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0 || fchown(fd, u->uid, u->gid) < 0) {
        err_set(err, err_len, "cannot give data directory %s to user %s: %s", datadir, u->name,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (chown_tree_fd(fd, u->uid, u->gid, err, err_len) < 0) {
        err_append(err, err_len, " (in data directory %s)", datadir);
        return -1;
    }
    return 0;
}

/* Checks that u can traverse every parent directory of datadir. */
static int check_parents(const char *datadir, const pgc_user *u, char *err, size_t err_len)
{
    char prefix[PATH_MAX];
    struct stat st;

    /* "/", "/a", "/a/b", ... up to the parent of datadir. */
    for (const char *s = datadir; (s = strchr(s, '/')) != NULL; s++) {
        size_t len = (size_t)(s - datadir);

        snprintf(prefix, sizeof prefix, "%.*s", len ? (int)len : 1, datadir);
        if (stat(prefix, &st) < 0) {
            err_set(err, err_len, "cannot stat %s: %s", prefix, strerror(errno));
            return -1;
        }
        if (!user_can_search(u, &st)) {
            err_set(err, err_len,
                    "the PostgreSQL server runs as user %s, which cannot enter directory %s "
                    "(mode %04o) on the way to data directory %s: run chmod o+x '%s', or choose "
                    "a data directory under a path that user can traverse",
                    u->name, prefix, (unsigned)(st.st_mode & 07777), datadir, prefix);
            return -1;
        }
    }
    return 0;
}

/* Creates (or checks) the fallback socket directory: 0700, owned by u. */
static int ensure_sockdir(const pgc_paths *paths, const pgc_user *u, char *err, size_t err_len)
{
    struct stat st;
    int fd = -1;
    int rc = -1;

    if (mkdir(paths->sockdir, 0700) < 0 && errno != EEXIST) {
        err_set(err, err_len, "cannot create socket directory %s: %s", paths->sockdir,
                strerror(errno));
        goto out;
    }
    fd = open(paths->sockdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        err_set(err, err_len,
                "cannot open socket directory %s: %s (remove it if it is not a directory)",
                paths->sockdir, strerror(errno));
        goto out;
    }
    if (st.st_uid != u->uid) {
        /* Ours (root) from an earlier run: hand it over. Anyone else's: refuse. */
        if (!(u->switch_user && st.st_uid == 0) || fchown(fd, u->uid, u->gid) < 0) {
            err_set(err, err_len,
                    "socket directory %s belongs to uid %d, not to the server user %s: remove it",
                    paths->sockdir, (int)st.st_uid, u->name);
            goto out;
        }
    }
    if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) < 0) {
        err_set(err, err_len, "cannot chmod socket directory %s: %s", paths->sockdir,
                strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---- configuration ------------------------------------------------------- */

/* Appends the include of crier.conf to postgresql.conf once. */
static int ensure_include(const char *datadir, char *err, size_t err_len)
{
    static const char text[] =
        "\n# Added by crier: crier.conf is rewritten at every start.\n" PGC_INCLUDE_LINE "\n";
    char path[PATH_MAX + 32];
    char line[1024];
    bool found = false;
    FILE *f;
    int fd = -1;
    int rc = -1;

    snprintf(path, sizeof path, "%s/postgresql.conf", datadir);
    f = fopen(path, "re");
    if (!f) {
        err_set(err, err_len, "cannot read %s: %s (is %s a PostgreSQL data directory?)", path,
                strerror(errno), datadir);
        return -1;
    }
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, PGC_INCLUDE_LINE, strlen(PGC_INCLUDE_LINE)))
            found = true;
    fclose(f);
    if (found)
        return 0;
    fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0 || write(fd, text, sizeof text - 1) != (ssize_t)(sizeof text - 1)) {
        err_set(err, err_len, "cannot append to %s: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Writes datadir/crier.conf (via a temporary file and rename). */
static int write_conf(const pgc_paths *paths, const crier_pg_cluster_options *opts,
                      const pgc_user *u, char *err, size_t err_len)
{
    char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
    char sockdir[2 * PATH_MAX];
    size_t o = 0;
    int max_conn = opts && opts->max_connections > 0 ? opts->max_connections : 100;
    FILE *f = NULL;
    int fd = -1;
    int rc = -1;

    /* Single-quoted configuration value: a quote is written twice. */
    for (const char *p = paths->sockdir; *p && o < sizeof sockdir - 2; p++) {
        if (*p == '\'')
            sockdir[o++] = '\'';
        sockdir[o++] = *p;
    }
    sockdir[o] = '\0';
    snprintf(path, sizeof path, "%s/%s", paths->datadir, PGC_CONF_NAME);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", paths->datadir, PGC_CONF_NAME);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        err_set(err, err_len, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (u->switch_user && fchown(fd, u->uid, u->gid) < 0) {
        err_set(err, err_len, "cannot chown %s: %s", tmp, strerror(errno));
        goto out;
    }
    f = fdopen(fd, "w");
    if (!f) {
        err_set(err, err_len, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    fprintf(f,
            "# Written by crier at every start of this cluster: edits here are overwritten.\n"
            "# Unix socket only: no TCP port is opened.\n"
            "listen_addresses = ''\n"
            "port = %d\n"
            "unix_socket_directories = '%s'\n"
            "max_connections = %d\n"
            "# Room for a busy engine's WAL between checkpoints: with the default (1GB), 8,000\n"
            "# deliveries a second forced a checkpoint every 11-28 s, and after each one the\n"
            "# first change of every page logs the whole page again (docs/BENCHMARKS.md, soak).\n"
            "# A soft limit: WAL grows towards it only under such load.\n"
            "max_wal_size = 4GB\n"
            "# Those full-page images, compressed.\n"
            "wal_compression = on\n",
            PGC_PORT, sockdir, max_conn);
    if (opts && opts->fast)
        fprintf(f, "# Throwaway cluster (tests, bench): durability traded for speed.\n"
                   "fsync = off\n"
                   "synchronous_commit = off\n"
                   "full_page_writes = off\n");
    if (fclose(f) != 0) {
        f = NULL;
        err_set(err, err_len, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    f = NULL;
    if (rename(tmp, path) < 0) {
        err_set(err, err_len, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* ---- initdb, start, stop ------------------------------------------------- */

static double elapsed_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static int run_initdb(const pgc_bins *bins, const pgc_user *u, const char *datadir, bool fast,
                      char *err, size_t err_len)
{
    char locale_arg[32];
    char *argv[12];
    int argc = 0;
    int rc;
    locale_t loc = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
    pgc_output *out = calloc(1, sizeof *out);

    if (!out) {
        err_set(err, err_len, "out of memory");
        return -1;
    }
    snprintf(locale_arg, sizeof locale_arg, "--locale=%s", loc ? "C.UTF-8" : "C");
    if (loc)
        freelocale(loc);
    argv[argc++] = (char *)bins->initdb;
    argv[argc++] = "-D";
    argv[argc++] = (char *)datadir;
    argv[argc++] = "-U";
    argv[argc++] = PGC_SUPERUSER;
    argv[argc++] = "--auth=trust";
    argv[argc++] = "-E";
    argv[argc++] = "UTF8";
    argv[argc++] = locale_arg;
    if (fast)
        argv[argc++] = "-N";
    argv[argc] = NULL;

    crier_info(PGC_MODULE, "initializing a new PostgreSQL cluster in %s (%s)", datadir,
               bins->initdb);
    rc = run_child(u, argv, out, err, err_len);
    if (rc != 0) {
        if (rc > 0) {
            err_set(err, err_len, "initdb failed (exit status %d) for data directory %s", rc,
                    datadir);
            err_append_output(err, err_len, "initdb", out);
            err_append(err, err_len, "\nFix the problem above, or choose another data directory");
        }
        rc = -1;
    }
    free(out);
    return rc;
}

/* Size of the server log now (0 if missing): where this attempt's lines begin. */
static off_t log_size(const char *logpath)
{
    struct stat st;

    return stat(logpath, &st) == 0 ? st.st_size : 0;
}

/* Whether a failed start is worth retrying: the log lines written since offset
 * say the previous postmaster was just killed and its zombie or its children
 * still hold the lock file or shared memory. */
static bool start_failure_is_transient(const char *logpath, off_t offset)
{
    char buf[8192];
    ssize_t n = -1;
    int fd = open(logpath, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return false;
    if (lseek(fd, offset, SEEK_SET) == offset)
        n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return strstr(buf, "pre-existing shared memory block") != NULL ||
           strstr(buf, "another postmaster") != NULL;
}

/* Whether the postmaster named in postmaster.pid is dead although pg_ctl status
 * says it runs: after a kill -9 it stays a zombie until init reaps it, and
 * kill(pid, 0) (pg_ctl's test) still succeeds. Linux /proc only; without /proc,
 * trust pg_ctl. */
static bool postmaster_is_dead(const char *datadir)
{
    char path[PATH_MAX + 32];
    crier_proc_stat st;
    long pid = 0;
    FILE *f;

    if (access("/proc/self/stat", R_OK) != 0)
        return false;
    snprintf(path, sizeof path, "%s/postmaster.pid", datadir);
    f = fopen(path, "re");
    if (!f)
        return false;
    if (fscanf(f, "%ld", &pid) != 1)
        pid = 0;
    fclose(f);
    if (pid <= 0)
        return false;
    switch (crier_proc_stat_read((pid_t)pid, &st)) {
    case 0:
        return st.state == 'Z' || st.state == 'X';
    case -1:
        return true; /* gone */
    default:
        return false; /* unreadable: trust pg_ctl */
    }
}

static int run_start(const pgc_bins *bins, const pgc_user *u, const pgc_paths *paths, char *err,
                     size_t err_len)
{
    char logpath[PATH_MAX + 32];
    char *argv[] = {(char *)bins->pg_ctl,
                    "-D",
                    (char *)paths->datadir,
                    "-l",
                    logpath,
                    "-w",
                    "-t",
                    "60",
                    "start",
                    NULL};
    pgc_output *out = calloc(1, sizeof *out);
    int rc = -1;

    if (!out) {
        err_set(err, err_len, "out of memory");
        return -1;
    }
    snprintf(logpath, sizeof logpath, "%s/%s", paths->datadir, PGC_LOG_NAME);
    for (int attempt = 1; attempt <= PGC_START_ATTEMPTS; attempt++) {
        off_t offset = log_size(logpath);

        rc = run_child(u, argv, out, err, err_len);
        if (rc <= 0)
            break;
        if (attempt < PGC_START_ATTEMPTS && start_failure_is_transient(logpath, offset)) {
            struct timespec pause = {0, 300 * 1000 * 1000};
            if (attempt == 1)
                crier_warn(PGC_MODULE,
                           "PostgreSQL in %s waits for the leftovers of a killed server "
                           "to go away; retrying for a few seconds",
                           paths->datadir);
            nanosleep(&pause, NULL);
            continue;
        }
        break;
    }
    if (rc != 0) {
        if (rc > 0) {
            err_set(err, err_len, "PostgreSQL failed to start in %s (pg_ctl exit status %d)",
                    paths->datadir, rc);
            err_append_output(err, err_len, "pg_ctl", out);
            err_append_log_tail(err, err_len, paths->datadir);
            err_append(err, err_len, "\nFix the problem shown above (full log: %s) and start again",
                       logpath);
        }
        rc = -1;
    }
    free(out);
    return rc;
}

/* Opens and locks the data directory against concurrent start/stop. */
static int lock_datadir(const char *datadir, char *err, size_t err_len)
{
    int fd = open(datadir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0) {
        err_set(err, err_len, "cannot open data directory %s: %s", datadir, strerror(errno));
        return -1;
    }
    while (flock(fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            err_set(err, err_len, "cannot lock data directory %s: %s", datadir, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

int crier_pg_cluster_start(const char *datadir, const crier_pg_cluster_options *opts,
                           char *conninfo, size_t conninfo_len, char *err, size_t err_len)
{
    pgc_bins *bins = NULL;
    pgc_paths *paths = NULL;
    pgc_output *out = NULL;
    pgc_user user;
    char abs[PATH_MAX];
    struct timespec t0;
    bool fast = opts && opts->fast;
    int lock_fd = -1;
    int rc = -1;
    int st;

    if (err && err_len)
        err[0] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!datadir || !*datadir) {
        err_set(err, err_len, "no data directory given for the PostgreSQL cluster");
        return -1;
    }
    bins = calloc(1, sizeof *bins);
    paths = calloc(1, sizeof *paths);
    out = calloc(1, sizeof *out);
    if (!bins || !paths || !out) {
        err_set(err, err_len, "out of memory");
        goto out;
    }
    if (find_bins(bins, err, err_len) < 0 || resolve_user(&user, err, err_len) < 0)
        goto out;
    if (make_absolute(datadir, abs, sizeof abs, err, err_len) < 0)
        goto out;
    if (!path_is_shell_safe(abs)) {
        err_set(err, err_len,
                "data directory path %s contains a character pg_ctl cannot pass through its shell "
                "(\" \\ $ ` or a control character): choose another directory",
                abs);
        goto out;
    }
    /* format_conninfo early too: a too-small buffer fails before anything starts. */
    if (mkdir_p(abs, user.switch_user, err, err_len) < 0 ||
        resolve_paths(abs, paths, err, err_len) < 0 ||
        format_conninfo(paths, conninfo, conninfo_len, err, err_len) < 0)
        goto out;
    lock_fd = lock_datadir(paths->datadir, err, err_len);
    if (lock_fd < 0)
        goto out;
    if (user.switch_user && check_parents(paths->datadir, &user, err, err_len) < 0)
        goto out;

    if (has_pg_version(paths->datadir)) {
        st = pg_ctl_status(bins, &user, paths->datadir, out, err, err_len);
        if (st < 0)
            goto out;
        if (st == 0 && postmaster_is_dead(paths->datadir)) {
            crier_warn(
                PGC_MODULE,
                "PostgreSQL in %s was killed (its postmaster is a zombie): starting it again",
                paths->datadir);
            st = 3;
        }
        if (st == 0) {
            crier_info(PGC_MODULE, "PostgreSQL already running in %s", paths->datadir);
            rc = format_conninfo(paths, conninfo, conninfo_len, err, err_len);
            goto out;
        }
        if (user.switch_user && chown_datadir(paths->datadir, &user, err, err_len) < 0)
            goto out;
    } else {
        if (!dir_is_empty(paths->datadir)) {
            err_set(
                err, err_len,
                "data directory %s is not empty but holds no PostgreSQL cluster (no PG_VERSION): "
                "choose an empty or missing directory for the cluster",
                paths->datadir);
            goto out;
        }
        if (user.switch_user && chown_datadir(paths->datadir, &user, err, err_len) < 0)
            goto out;
        if (run_initdb(bins, &user, paths->datadir, fast, err, err_len) < 0)
            goto out;
    }
    if (ensure_include(paths->datadir, err, err_len) < 0 ||
        write_conf(paths, opts, &user, err, err_len) < 0)
        goto out;
    if (paths->sock_fallback && ensure_sockdir(paths, &user, err, err_len) < 0)
        goto out;
    crier_info(PGC_MODULE, "starting PostgreSQL in %s (socket in %s%s)", paths->datadir,
               paths->sockdir, fast ? ", fast unsafe settings" : "");
    if (run_start(bins, &user, paths, err, err_len) < 0)
        goto out;
    if (format_conninfo(paths, conninfo, conninfo_len, err, err_len) < 0)
        goto out;
    crier_info(PGC_MODULE, "PostgreSQL ready in %s (%.2fs)", paths->datadir, elapsed_since(&t0));
    rc = 0;
out:
    if (lock_fd >= 0)
        close(lock_fd);
    free(bins);
    free(paths);
    free(out);
    return rc;
}

int crier_pg_cluster_conninfo(const char *datadir, char *conninfo, size_t conninfo_len, char *err,
                              size_t err_len)
{
    pgc_paths *paths = NULL;
    int rc = -1;

    if (err && err_len)
        err[0] = '\0';
    if (!datadir || !*datadir) {
        err_set(err, err_len, "no data directory given for the PostgreSQL cluster");
        return -1;
    }
    paths = calloc(1, sizeof *paths);
    if (!paths) {
        err_set(err, err_len, "out of memory");
        goto out;
    }
    if (resolve_paths(datadir, paths, err, err_len) < 0)
        goto out;
    if (!has_pg_version(paths->datadir)) {
        err_set(err, err_len, "%s holds no PostgreSQL cluster (no PG_VERSION): start it first",
                paths->datadir);
        goto out;
    }
    rc = format_conninfo(paths, conninfo, conninfo_len, err, err_len);
out:
    free(paths);
    return rc;
}

int crier_pg_cluster_stop(const char *datadir, char *err, size_t err_len)
{
    pgc_bins *bins = NULL;
    pgc_paths *paths = NULL;
    pgc_output *out = NULL;
    pgc_user user;
    char abs[PATH_MAX];
    struct stat sb;
    int lock_fd = -1;
    int rc = -1;
    int st;

    if (err && err_len)
        err[0] = '\0';
    if (!datadir || !*datadir) {
        err_set(err, err_len, "no data directory given for the PostgreSQL cluster");
        return -1;
    }
    if (make_absolute(datadir, abs, sizeof abs, err, err_len) < 0)
        return -1;
    if (stat(abs, &sb) < 0 && errno == ENOENT)
        return 0; /* no directory, no server */
    bins = calloc(1, sizeof *bins);
    paths = calloc(1, sizeof *paths);
    out = calloc(1, sizeof *out);
    if (!bins || !paths || !out) {
        err_set(err, err_len, "out of memory");
        goto out;
    }
    if (resolve_paths(abs, paths, err, err_len) < 0)
        goto out;
    if (!has_pg_version(paths->datadir)) {
        rc = 0;
        goto out;
    }
    if (find_bins(bins, err, err_len) < 0 || resolve_user(&user, err, err_len) < 0)
        goto out;
    lock_fd = lock_datadir(paths->datadir, err, err_len);
    if (lock_fd < 0)
        goto out;
    st = pg_ctl_status(bins, &user, paths->datadir, out, err, err_len);
    if (st < 0)
        goto out;
    if (st == 0 && postmaster_is_dead(paths->datadir))
        st = 3; /* killed: nothing to stop (start copes with the stale postmaster.pid) */
    if (st == 0) {
        char *argv[] = {(char *)bins->pg_ctl,
                        "-D",
                        paths->datadir,
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        "60",
                        "stop",
                        NULL};

        crier_info(PGC_MODULE, "stopping PostgreSQL in %s", paths->datadir);
        st = run_child(&user, argv, out, err, err_len);
        if (st < 0)
            goto out;
        if (st != 0) {
            pgc_output *again = calloc(1, sizeof *again);
            int now = again ? pg_ctl_status(bins, &user, paths->datadir, again, NULL, 0) : -1;

            free(again);
            if (now != 3) {
                err_set(err, err_len, "PostgreSQL in %s did not stop (pg_ctl exit status %d)",
                        paths->datadir, st);
                err_append_output(err, err_len, "pg_ctl", out);
                err_append_log_tail(err, err_len, paths->datadir);
                err_append(err, err_len,
                           "\nRetry, or stop it by hand: %s -D '%s' -m immediate stop (as the "
                           "server user %s)",
                           bins->pg_ctl, paths->datadir, user.name);
                goto out;
            }
        }
        crier_info(PGC_MODULE, "PostgreSQL stopped in %s", paths->datadir);
    } else if (st != 3) {
        err_set(err, err_len,
                "cannot tell whether PostgreSQL runs in %s (pg_ctl status exit status %d)",
                paths->datadir, st);
        err_append_output(err, err_len, "pg_ctl", out);
        goto out;
    }
    if (paths->sock_fallback)
        rmdir(paths->sockdir); /* only if empty; harmless otherwise */
    rc = 0;
out:
    if (lock_fd >= 0)
        close(lock_fd);
    free(bins);
    free(paths);
    free(out);
    return rc;
}
