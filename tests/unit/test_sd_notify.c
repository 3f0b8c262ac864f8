/* test_sd_notify.c — unit test of sd_notify.c against real datagram sockets:
 * a path socket and an abstract one receive exactly the state sent, a bad
 * name is refused with a message, and crier_sd_notify_init takes
 * NOTIFY_SOCKET and the watchdog from the environment (and out of it, so
 * children do not inherit them). Exits 1 on any failure. */
#include "check.h"
#include "sd_notify.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* A datagram socket bound to name ("/path" or "@abstract"); exits on failure. */
static int bind_socket(const char *name)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct timeval tv = {.tv_sec = 2};
    size_t len = strlen(name);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    memcpy(addr.sun_path, name, len);
    if (name[0] == '@')
        addr.sun_path[0] = '\0';
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0) {
        perror(name);
        exit(1);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* The next datagram on fd as a string ("" after the 2 s timeout). */
static const char *receive(int fd)
{
    static char buf[1024];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

int main(void)
{
    const char *base = getenv("CRIER_TEST_DIR");
    char path[200], abstract[64], env[32], err[256] = "";
    int fd, afd;

    /* CRIER_TEST_DIR may not exist yet (unit tests run first), and sun_path is short */
    if (!base || !*base || strlen(base) >= 100 || access(base, W_OK) != 0)
        base = "/tmp";
    snprintf(path, sizeof path, "%s/sd-notify-%d.sock", base, (int)getpid());
    unlink(path);
    fd = bind_socket(path);
    snprintf(abstract, sizeof abstract, "@crier-test-sd-notify-%d", (int)getpid());
    afd = bind_socket(abstract);

    /* a path socket and an abstract one get the state as sent */
    CHECK(crier_sd_notify_to(path, "READY=1\nSTATUS=running", err, sizeof err) == 0);
    CHECK_STR(receive(fd), "READY=1\nSTATUS=running");
    CHECK(crier_sd_notify_to(abstract, "WATCHDOG=1", err, sizeof err) == 0);
    CHECK_STR(receive(afd), "WATCHDOG=1");

    /* names that are neither, and a socket nobody listens on */
    CHECK(crier_sd_notify_to("relative.sock", "READY=1", err, sizeof err) == -1);
    CHECK(strstr(err, "not a path or an abstract name") != NULL);
    CHECK(crier_sd_notify_to("/nonexistent/crier.sock", "READY=1", err, sizeof err) == -1);
    CHECK(strstr(err, "cannot notify /nonexistent/crier.sock") != NULL);

    /* nothing to notify before init found a socket: not an error */
    CHECK(crier_sd_notify("READY=1", err, sizeof err) == 0);

    /* init takes the socket and this process's watchdog from the environment, and out of it */
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "4000000", 1);
    snprintf(env, sizeof env, "%d", (int)getpid());
    setenv("WATCHDOG_PID", env, 1);
    CHECK(crier_sd_notify_init());
    CHECK(getenv("NOTIFY_SOCKET") == NULL);
    CHECK(getenv("WATCHDOG_USEC") == NULL);
    CHECK(getenv("WATCHDOG_PID") == NULL);
    CHECK(crier_sd_watchdog_timeout() > 3.99 && crier_sd_watchdog_timeout() < 4.01);
    CHECK(crier_sd_notify("STOPPING=1", err, sizeof err) == 0);
    CHECK_STR(receive(fd), "STOPPING=1");
    /* a second init keeps what the first took */
    CHECK(crier_sd_notify_init());
    CHECK(crier_sd_notify("READY=1", err, sizeof err) == 0);
    CHECK_STR(receive(fd), "READY=1");

    close(fd);
    close(afd);
    unlink(path);
    return CHECK_DONE();
}
