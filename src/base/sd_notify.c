/* sd_notify.c — the service manager's notification socket, spoken without
 * libsystemd (see sd_notify.h). */
#include "sd_notify.h"
#include "log.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static bool notify_initialised;
static char notify_socket[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
static double notify_watchdog_s;

bool crier_sd_notify_init(void)
{
    const char *sock, *usec, *pid;

    if (notify_initialised)
        return notify_socket[0] != '\0';
    notify_initialised = true;
    sock = getenv("NOTIFY_SOCKET");
    usec = getenv("WATCHDOG_USEC");
    pid = getenv("WATCHDOG_PID");
    if (sock && (sock[0] == '/' || sock[0] == '@') && strlen(sock) < sizeof notify_socket)
        snprintf(notify_socket, sizeof notify_socket, "%s", sock);
    else if (sock && *sock)
        crier_warn("sd_notify",
                   "NOTIFY_SOCKET=%s is not a path or an abstract name (@…): not notifying", sock);
    /* the watchdog is this process's only when WATCHDOG_PID is unset or names it */
    if (usec && (!pid || strtol(pid, NULL, 10) == (long)getpid())) {
        char *end;
        unsigned long long v = strtoull(usec, &end, 10);
        if (*usec && !*end && v > 0)
            notify_watchdog_s = (double)v / 1e6;
    }
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    return notify_socket[0] != '\0';
}

int crier_sd_notify_to(const char *socket_name, const char *state, char *err, size_t err_len)
{
    struct sockaddr_un addr;
    size_t name_len = strlen(socket_name);
    socklen_t addr_len;
    ssize_t sent;
    int fd, rc = -1;

    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (name_len == 0 || name_len >= sizeof addr.sun_path ||
        (socket_name[0] != '/' && socket_name[0] != '@')) {
        crier_set_error(err, err_len,
                        "notification socket '%s' is not a path or an abstract name (@…)",
                        socket_name);
        return -1;
    }
    memcpy(addr.sun_path, socket_name, name_len);
    if (addr.sun_path[0] == '@')
        addr.sun_path[0] = '\0'; /* an abstract name: its length counts, no NUL at its end */
    addr_len =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + name_len + (socket_name[0] == '/'));
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        crier_set_error(err, err_len, "cannot create a socket to notify %s: %s", socket_name,
                        strerror(errno));
        return -1;
    }
    sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&addr, addr_len);
    if (sent < 0)
        crier_set_error(err, err_len, "cannot notify %s: %s", socket_name, strerror(errno));
    else if ((size_t)sent != strlen(state))
        crier_set_error(err, err_len, "cannot notify %s: the datagram was cut short", socket_name);
    else
        rc = 0;
    close(fd);
    return rc;
}

int crier_sd_notify(const char *state, char *err, size_t err_len)
{
    if (!notify_socket[0])
        return 0;
    return crier_sd_notify_to(notify_socket, state, err, err_len);
}

double crier_sd_watchdog_timeout(void)
{
    return notify_watchdog_s;
}
