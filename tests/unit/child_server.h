/* child_server.h — starts a test server (a Python script from tests/support) as
 * a child process and waits for it to write the port it listens on into a
 * port file; stops it again. Shared by the C unit tests that talk to real
 * local servers. */
#ifndef CRIER_TEST_CHILD_SERVER_H
#define CRIER_TEST_CHILD_SERVER_H

#include <signal.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Stops a child started by child_server_start (TERM, and CONT in case a test
 * stopped it) and reaps it. pid <= 0 is a no-op. */
static void child_server_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
}

/* Runs argv (argv[0] a full path, NULL-terminated) and waits up to 10 s for a
 * positive port number in port_file (which the caller removed beforehand).
 * Returns the child's pid with *port set, or -1 (message printed; no child
 * left behind). */
static pid_t child_server_start(const char *const *argv, const char *port_file, int *port)
{
    pid_t pid = fork();

    if (pid < 0)
        return -1;
    if (pid == 0) {
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(port_file, "r");
        int status;

        if (f) {
            int ok = fscanf(f, "%d", port) == 1;
            fclose(f);
            if (ok && *port > 0)
                return pid;
        }
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "%s exited early (status %d)\n", argv[1] ? argv[1] : argv[0], status);
            return -1;
        }
        usleep(10000);
    }
    fprintf(stderr, "%s did not write %s within 10 s\n", argv[1] ? argv[1] : argv[0], port_file);
    child_server_stop(pid);
    return -1;
}

#endif
