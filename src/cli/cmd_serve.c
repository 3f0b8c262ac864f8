/* cmd_serve.c — `crier serve`: the daemon (fan-out and delivery workers) on the
 * configured database or the embedded default. */
#include "cli.h"
#include "engine.h"
#include "http_operator.h"
#include "http_server.h"
#include "log.h"
#include "migrate.h"
#include "rules_query.h"
#include "sd_notify.h"
#include "target_guard.h"

#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char serve_help[] =
    "usage: crier serve --rules DIR [options]\n"
    "\n"
    "Runs the engine: claims events, runs the rules, fans out notifications and\n"
    "delivers them. The rules have no default: --rules DIR, CRIER_RULES or\n"
    "rules = \"DIR\" in a --config file (the bundled example rules are named at\n"
    "the end). Once the flags are checked and the rules load, it starts the\n"
    "embedded PostgreSQL cluster when no database is configured (and stops it on\n"
    "exit) and applies pending migrations.\n"
    "SIGTERM/SIGINT stop gracefully. The rules reload when a *.lua file in the rules\n"
    "directory changes (write a temporary file and rename it over the old one to\n"
    "deploy) and on SIGHUP; a broken version is rejected, logged with file:line and\n"
    "shown by crier status, and the running one kept.\n"
    "Under systemd (Type=notify, packaging/crier.service.in) it says READY=1 once it\n"
    "serves, STOPPING=1 on SIGTERM, and pings the watchdog when WatchdogSec= is set\n"
    "(docs/OPERATIONS.md).\n"
    "\n"
    "options:\n" CLI_COMMON_HELP CLI_RULE_QUERY_HELP
    "  --batch-size N         events per fan-out transaction (default 500)\n"
    "  --delivery-batch N     deliveries per claim (default 200)\n"
    "  --event-attempts N     rule runs of a failing event before it is quarantined\n"
    "                         (dead, see crier dead list; default 5)\n"
    "  --slow-rule D          an event whose rule runs longer moves to the slow lane,\n"
    "                         planned apart on its own thread with the rules' full\n"
    "                         limits, with its type's next events for a minute\n"
    "                         (default 100ms)\n"
    "  --batch-budget D       rules time per fan-out batch; the events not planned by\n"
    "                         then wait for the next batch, untouched (default 2s)\n"
    "  --copy-min N           a fan-out batch of at least N new notifications writes\n"
    "                         them and their deliveries with COPY, PostgreSQL's bulk\n"
    "                         load (default 256; above --batch-size x recipients: never)\n"
    "  --fanout-connections N fan-out batches in flight at once, each on its own\n"
    "                         connection, the second and later each on a thread of\n"
    "                         its own: one batch's rules run while another's rows\n"
    "                         are written, and rules run on several cores\n"
    "                         (default 2, at most 8)\n"
    "  --max-inflight N       concurrent sends (default 512)\n"
    "  --lease SECONDS        delivery lease (default 60)\n"
    "  --poll SECONDS         fallback poll interval (default 1)\n"
    "  --awake-poll D         while awake, how often to look for new events with one\n"
    "                         cheap query; emits do not NOTIFY then (default 2ms)\n"
    "  --sleep-after D        idle time after which the daemon sleeps and emits\n"
    "                         wake it with NOTIFY (default 100ms)\n"
    "  --linger D|off         under load (see --linger-rate), claim new events every\n"
    "                         D (no probe) instead of probing every --awake-poll:\n"
    "                         fewer, bigger fan-out batches, less database work per\n"
    "                         event, up to D more latency (default 25ms; off: always\n"
    "                         --awake-poll)\n"
    "  --linger-rate N        events/s fanned out from which the daemon is under\n"
    "                         load (measured over 100 ms; default 1200); it stays\n"
    "                         so until the rate falls below N/2\n"
    "  --retain-events D      delete done and dead events D after they finished\n"
    "                         (default 7d; off: keep): a re-emit is recognised that long\n"
    "  --retain-deliveries D  delete delivered, dead, suppressed and digested\n"
    "                         deliveries and their attempts (default 7d; off)\n"
    "  --retain-timers D      delete fired timers (default 7d; off)\n"
    "  --retain-digests D     delete sent digests (default 7d; off)\n"
    "  --retain-throttle-hits D  delete throttle hits (default 7d; longer than any\n"
    "                         throttle's window; off)\n"
    "  --retention-interval D time between retention passes (default 60s)\n"
    "  --retention-batch N    rows per retention statement (default 1000)\n"
    "  --timeout-ms N         webhook total timeout (default 15000)\n"
    "  --shutdown-deadline D  on SIGTERM, how long sends in flight may finish before\n"
    "                         they are released to other workers (default 10s)\n"
    "  --heartbeat D          how often this worker records its heartbeat in the\n"
    "                         database; it counts as dead after 3 missed (default 5s)\n"
    "  --pause-after N        consecutive failures that pause a webhook endpoint (default 20)\n"
    "  --probe-interval D     first probe of a paused endpoint, doubling up to 1h (default 30s)\n"
    "  --disable-after D      disable an endpoint failing this long, emit\n"
    "                         crier.endpoint.disabled (default 5d)\n"
    "  --allow-targets LIST   webhook targets allowed besides public addresses: any of\n"
    "                         loopback, private, link-local (comma-separated), or none\n"
    "                         (default: $CRIER_ALLOW_TARGETS, else none: refused)\n"
    "  --ca-file FILE         CA certificates (PEM) that https webhook receivers and\n"
    "                         SMTP servers are verified against (default: the system\n"
    "                         bundle, e.g. /etc/ssl/certs/ca-certificates.crt; also\n"
    "                         CRIER_CA_FILE)\n"
    "  --smtp-url URL         SMTP server for the email channel: smtp://host:port or\n"
    "                         smtps://host:port (STARTTLS is used when offered)\n"
    "  --smtp-user NAME       SMTP AUTH user; the password comes from CRIER_SMTP_PASSWORD\n"
    "  --email-from ADDRESS   From address when a rule gives none\n"
    "  --kafka-brokers LIST   bootstrap servers (host:port,...) for the kafka channel\n"
    "  --exit-when-idle       exit once no event or delivery is due\n"
    "  --no-workers           serve the HTTP API only (needs --http): no fan-out, timers or\n"
    "                         delivery in this process, which is then no worker (other\n"
    "                         crier serve processes do the work); its rules reload on SIGHUP\n"
    "  --no-deliver           fan out only: create deliveries but send none (another\n"
    "                         crier serve's delivery worker sends them)\n"
    "  --no-migrate           do not apply pending migrations at start (a database\n"
    "                         that lacks them is refused: run crier migrate)\n"
    "\n"
    "HTTP API (docs/API.md; off unless --http or CRIER_HTTP is given):\n"
    "  --http HOST:PORT       serve the HTTP API there (e.g. 127.0.0.1:8080; [::1]:8080;\n"
    "                         :8080 for every interface; port 0 picks a free one, logged)\n"
    "  --http-threads N       request threads, each with a database connection (default 4)\n"
    "  --http-max-body BYTES  largest request body, e.g. 65536, 512k, 1m (default 1m)\n"
    "  --http-max-connections N  open connections, live feeds included (default 1024;\n"
    "                         the open-files limit is raised to match when it can be)\n"
    "  --http-max-per-address N  open connections from one client address (default 64;\n"
    "                         0: no limit); behind a proxy every client has the proxy's\n"
    "                         address: raise it, and limit clients at the proxy\n"
    "  --http-read-timeout D  a request's headers and body must arrive within D of\n"
    "                         the connection opening or its last answer, else the\n"
    "                         connection is closed; also how long a kept-alive\n"
    "                         connection may idle (default 10s)\n"
    "  --http-max-streams N   live feeds open at once; the other connections stay\n"
    "                         for ordinary requests (default half of\n"
    "                         --http-max-connections)\n"
    "  --cors-origin LIST     origins browsers may call the API from: comma-separated\n"
    "                         exact origins (https://app.example.com) or * (default: none;\n"
    "                         also CRIER_CORS_ORIGIN)\n"
    "  --healthz-max-lag D    /healthz and /readyz fail when the oldest due event (or\n"
    "                         delivery) has waited longer; and while no worker is alive\n"
    "                         (default 60s)\n"
    "  --stream-keepalive D   comment line interval on live feeds (GET /v1/feed/stream,\n"
    "                         Server-Sent Events; default 15s)\n"
    "  --operator-key KEY     the status page (http://HOST:PORT/ or /status) and its\n"
    "                         data (/status.json) need Authorization: Bearer KEY, from\n"
    "                         any address (at least 16 characters; prefer the\n"
    "                         environment: CRIER_OPERATOR_KEY). Without it the status\n"
    "                         page answers loopback clients only\n"    "durations (D) take a unit: 90, 1.5s, 250ms, 10m, 2h, 5d.\n";

enum {
    SERVE_OPT_HTTP = 2000,
    SERVE_OPT_HTTP_THREADS,
    SERVE_OPT_HTTP_MAX_BODY,
    SERVE_OPT_CORS_ORIGIN,
    SERVE_OPT_HEALTHZ_MAX_LAG,
    SERVE_OPT_STREAM_KEEPALIVE,
    SERVE_OPT_HTTP_MAX_CONNECTIONS,
    SERVE_OPT_HTTP_MAX_PER_ADDRESS,
    SERVE_OPT_HTTP_READ_TIMEOUT,
    SERVE_OPT_HTTP_MAX_STREAMS,
    SERVE_OPT_SLOW_RULE,
    SERVE_OPT_BATCH_BUDGET,
    SERVE_OPT_COPY_MIN,
    SERVE_OPT_HEARTBEAT,
    SERVE_OPT_NO_WORKERS,
    SERVE_OPT_OPERATOR_KEY,
    SERVE_OPT_NO_DELIVER,
    SERVE_OPT_FANOUT_CONNECTIONS,
    SERVE_OPT_AWAKE_POLL,
    SERVE_OPT_SLEEP_AFTER,
    SERVE_OPT_LINGER,
    SERVE_OPT_LINGER_RATE,
    SERVE_OPT_RETAIN_EVENTS, /* … one per crier_retain_kind, in its order */
    SERVE_OPT_RETAIN_DELIVERIES,
    SERVE_OPT_RETAIN_TIMERS,
    SERVE_OPT_RETAIN_DIGESTS,
    SERVE_OPT_RETAIN_THROTTLE_HITS,
    SERVE_OPT_RETENTION_INTERVAL,
    SERVE_OPT_RETENTION_BATCH,
    SERVE_OPT_CA_FILE,
};

typedef struct {
    crier_engine_config cfg;
    bool migrate;
    bool no_workers; /* the HTTP API only */
    int timeout_ms;
    crier_http_server_options http;
} serve_args;

/* "65536", "512k", "1m" → bytes; -1 when malformed or out of range. */
static long long serve_size(const char *arg)
{
    char *end;
    long long v = strtoll(arg, &end, 10);
    long long unit = 1;
    if (end == arg || v <= 0)
        return -1;
    if (*end == 'k' || *end == 'K')
        unit = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        unit = 1024 * 1024, end++;
    if (*end || v > (64LL << 20) / unit)
        return -1;
    return v * unit;
}

/* An option that takes a positive duration or "off" (stored as -1). */
static int serve_duration_or_off(const char *name, const char *arg, double *seconds)
{
    if (!strcmp(arg, "off")) {
        *seconds = -1;
        return 0;
    }
    return crier_cli_duration("serve", name, arg, seconds);
}

static int serve_option(void *ud, int opt, const char *arg)
{
    serve_args *a = ud;
    char *end;

    switch (opt) {
    case 'b':
        return crier_cli_positive_int("serve", "batch-size", arg, 100000, &a->cfg.fanout.batch_size);
    case 'd':
        return crier_cli_positive_int("serve", "delivery-batch", arg, 100000, &a->cfg.delivery.batch_size);
    case 'm':
        if (crier_cli_positive_int("serve", "max-inflight", arg, 100000, &a->cfg.delivery.max_inflight) < 0)
            return -1;
        a->cfg.webhook.max_inflight = a->cfg.delivery.max_inflight;
        return 0;
    case 'l':
        return crier_cli_positive_int("serve", "lease", arg, 86400, &a->cfg.delivery.lease_seconds);
    case 'p':
        a->cfg.poll_interval = strtod(arg, &end);
        if (*end || a->cfg.poll_interval <= 0) {
            crier_cli_error("serve", "--poll expects a positive number of seconds, got '%s'", arg);
            return -1;
        }
        return 0;
    case 't':
        return crier_cli_positive_int("serve", "timeout-ms", arg, 3600000, &a->timeout_ms);
    case 'x':
        a->cfg.exit_when_idle = true;
        return 0;
    case SERVE_OPT_NO_WORKERS:
        a->no_workers = true;
        return 0;
    case 'n':
        a->migrate = false;
        return 0;
    case 'R':
        return crier_cli_positive_int("serve", "event-attempts", arg, 1000, &a->cfg.fanout.max_attempts);
    case 'D':
        return crier_cli_duration("serve", "shutdown-deadline", arg, &a->cfg.shutdown_deadline);
    case 'P':
        return crier_cli_positive_int("serve", "pause-after", arg, 1000000, &a->cfg.delivery.pause_after);
    case 'I':
        return crier_cli_duration("serve", "probe-interval", arg, &a->cfg.delivery.probe_seconds);
    case 'A':
        return crier_cli_duration("serve", "disable-after", arg, &a->cfg.delivery.disable_after_s);
    case 'S':
        if (strncmp(arg, "smtp://", 7) && strncmp(arg, "smtps://", 8)) {
            crier_cli_error("serve", "--smtp-url expects smtp://host:port or smtps://host:port, got '%s'", arg);
            return -1;
        }
        a->cfg.delivery.email_url = arg;
        return 0;
    case 'U':
        a->cfg.delivery.email_username = arg;
        a->cfg.delivery.email_password = getenv("CRIER_SMTP_PASSWORD");
        if (!a->cfg.delivery.email_password) {
            crier_cli_error("serve", "--smtp-user needs the password in the environment variable "
                                     "CRIER_SMTP_PASSWORD");
            return -1;
        }
        return 0;
    case 'F':
        a->cfg.delivery.email_from = arg;
        return 0;
    case 'T': {
        char why[256];
        if (crier_target_parse_allow(arg, &a->cfg.webhook.allow_targets, why, sizeof why) < 0) {
            crier_cli_error("serve", "--allow-targets: %s", why);
            return -1;
        }
        return 0;
    }
    case SERVE_OPT_CA_FILE: {
        FILE *f = fopen(arg, "r");
        struct stat st;
        const char *why = !f ? strerror(errno)
                          : fstat(fileno(f), &st) < 0 ? strerror(errno)
                          : !S_ISREG(st.st_mode) ? "not a regular file"
                                                  : NULL;
        if (f)
            fclose(f);
        if (why) {
            crier_cli_error("serve", "--ca-file %s: %s; give a readable file of PEM CA certificates", arg, why);
            return -1;
        }
        a->cfg.webhook.ca_file = arg;
        a->cfg.email.ca_file = arg;
        return 0;
    }
    case 'K':
        if (!*arg) {
            crier_cli_error("serve", "--kafka-brokers expects host:port[,host:port...]");
            return -1;
        }
        a->cfg.kafka.bootstrap_servers = arg;
        return 0;
    case SERVE_OPT_HTTP: {
        /* the syntax is checked here, before anything runs; the address when the API starts */
        const char *port = strrchr(arg, ':');
        long n = port && port[1] ? strtol(port + 1, &end, 10) : -1;
        if (!port || !port[1] || *end || n < 0 || n > 65535) {
            crier_cli_error("serve", "--http expects HOST:PORT (127.0.0.1:8080, [::1]:8080, :8080), got '%s'", arg);
            return -1;
        }
        a->http.listen = arg;
        return 0;
    }
    case SERVE_OPT_HTTP_THREADS:
        return crier_cli_positive_int("serve", "http-threads", arg, 256, &a->http.threads);
    case SERVE_OPT_HTTP_MAX_BODY: {
        long long n = serve_size(arg);
        if (n < 0) {
            crier_cli_error("serve", "--http-max-body expects bytes up to 64m (65536, 512k, 1m), got '%s'", arg);
            return -1;
        }
        a->http.max_body = (size_t)n;
        return 0;
    }
    case SERVE_OPT_CORS_ORIGIN:
        a->http.cors_origins = arg;
        return 0;
    case SERVE_OPT_HEARTBEAT:
        return crier_cli_duration("serve", "heartbeat", arg, &a->cfg.heartbeat_interval);
    case SERVE_OPT_HEALTHZ_MAX_LAG:
        return crier_cli_duration("serve", "healthz-max-lag", arg, &a->http.healthz_max_lag);
    case SERVE_OPT_HTTP_MAX_CONNECTIONS:
        return crier_cli_positive_int("serve", "http-max-connections", arg, 1000000,
                                      &a->http.max_connections);
    case SERVE_OPT_HTTP_MAX_PER_ADDRESS:
        if (!strcmp(arg, "0")) {
            a->http.max_per_address = -1; /* no limit */
            return 0;
        }
        return crier_cli_positive_int("serve", "http-max-per-address", arg, 1000000,
                                      &a->http.max_per_address);
    case SERVE_OPT_HTTP_READ_TIMEOUT:
        return crier_cli_duration("serve", "http-read-timeout", arg, &a->http.read_timeout);
    case SERVE_OPT_HTTP_MAX_STREAMS:
        return crier_cli_positive_int("serve", "http-max-streams", arg, 1000000,
                                      &a->http.max_streams);
    case SERVE_OPT_SLOW_RULE:
        return crier_cli_duration("serve", "slow-rule", arg, &a->cfg.fanout.slow_after);
    case SERVE_OPT_COPY_MIN:
        return crier_cli_positive_int("serve", "copy-min", arg, 100000000, &a->cfg.fanout.copy_min);
    case SERVE_OPT_BATCH_BUDGET:
        return crier_cli_duration("serve", "batch-budget", arg, &a->cfg.fanout.batch_budget);
    case SERVE_OPT_NO_DELIVER:
        a->cfg.delivery.parked = true;
        return 0;
    case SERVE_OPT_FANOUT_CONNECTIONS:
        return crier_cli_positive_int("serve", "fanout-connections", arg, CRIER_ENGINE_MAX_FANOUTS,
                                      &a->cfg.fanout_connections);
    case SERVE_OPT_AWAKE_POLL:
        return crier_cli_duration("serve", "awake-poll", arg, &a->cfg.wake.awake_poll);
    case SERVE_OPT_SLEEP_AFTER:
        return crier_cli_duration("serve", "sleep-after", arg, &a->cfg.wake.sleep_after);
    case SERVE_OPT_LINGER:
        return serve_duration_or_off("linger", arg, &a->cfg.wake.linger);
    case SERVE_OPT_LINGER_RATE: {
        int rate;
        if (crier_cli_positive_int("serve", "linger-rate", arg, 100000000, &rate) != 0)
            return -1;
        a->cfg.wake.linger_rate = rate;
        return 0;
    }
    case SERVE_OPT_RETAIN_EVENTS:
    case SERVE_OPT_RETAIN_DELIVERIES:
    case SERVE_OPT_RETAIN_TIMERS:
    case SERVE_OPT_RETAIN_DIGESTS:
    case SERVE_OPT_RETAIN_THROTTLE_HITS: {
        crier_retain_kind kind = (crier_retain_kind)(opt - SERVE_OPT_RETAIN_EVENTS);
        char name[64];
        snprintf(name, sizeof name, "retain-%s", crier_retention_kind_name(kind));
        for (char *c = name; *c; c++)
            if (*c == '_')
                *c = '-';
        return serve_duration_or_off(name, arg, &a->cfg.retention.period[kind]);
    }
    case SERVE_OPT_RETENTION_INTERVAL:
        return crier_cli_duration("serve", "retention-interval", arg, &a->cfg.retention.interval);
    case SERVE_OPT_RETENTION_BATCH:
        return crier_cli_positive_int("serve", "retention-batch", arg, 100000, &a->cfg.retention.batch);
    case SERVE_OPT_STREAM_KEEPALIVE:
        return crier_cli_duration("serve", "stream-keepalive", arg, &a->http.stream_keepalive);
    case SERVE_OPT_OPERATOR_KEY:
        if (strlen(arg) < CRIER_OPERATOR_KEY_MIN || crier_http_has_controls(arg, strlen(arg)) ||
            strchr(arg, ' ')) {
            crier_cli_error("serve",
                            "--operator-key (or CRIER_OPERATOR_KEY) expects at least %d characters "
                            "without spaces (e.g. openssl rand -hex 24)",
                            CRIER_OPERATOR_KEY_MIN);
            return -1;
        }
        a->http.operator_key = arg;
        return 0;
    }
    return -1;
}

/* Resolves the rules' queries' connection and checks its role before
 * anything runs: a privileged role is refused (unless
 * --allow-privileged-rule-queries: then warned about), an unreachable one is
 * warned about (only rules that query need it). Returns 0, or -1 after
 * printing why serve cannot start. */
static int serve_check_rule_queries(const crier_cli *cli, crier_database *db)
{
    char err[2048];
    crier_rules_query *q;
    int rc;

    if (crier_database_rules(db, cli->rules_database, err, sizeof err) < 0) {
        crier_cli_error("serve", "--rules-database: %s", err);
        return -1;
    }
    q = crier_rules_query_new(db->rules_conninfo, 0, crier_cli_rule_query_role(cli));
    if (!q) {
        crier_cli_error("serve", "out of memory");
        return -1;
    }
    rc = crier_rules_query_check(q, err, sizeof err);
    crier_rules_query_free(q);
    if (rc == CRIER_RULES_QUERY_PRIVILEGED) {
        crier_cli_error("serve", "%s", err);
        return -1;
    }
    if (rc == CRIER_RULES_QUERY_UNREACHABLE)
        crier_warn("serve", "rules that query the database will fail until this is fixed: %s", err);
    return 0;
}

/* With --no-migrate: checks that the database holds this crier's schema.
 * Returns 0, or -1 with err set ("run crier migrate", or why it could not
 * connect). */
/* --migrate: applies the migrations, each line of what it did logged (so
 * that CRIER_LOG_FORMAT=json keeps stderr one JSON object per line). */
static int serve_migrate(const char *conninfo, char *err, size_t err_len)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    int rc = crier_migrate_run(conninfo, out, err, err_len);
    if (out)
        fclose(out);
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        else
            next = line + strlen(line);
        crier_info("migrate", "%s", line);
    }
    free(text);
    return rc;
}

static int serve_check_schema(const char *conninfo, char *err, size_t err_len)
{
    PGconn *conn = PQconnectdb(conninfo);
    int rc = -1;
    if (PQstatus(conn) != CONNECTION_OK)
        snprintf(err, err_len, "cannot connect: %s", PQerrorMessage(conn));
    else
        rc = crier_migrate_check(conn, err, err_len);
    PQfinish(conn);
    return rc;
}

static void serve_api_signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    if (w->signum == SIGHUP) {
        crier_info("serve", "SIGHUP: reloading the API's rules");
        crier_http_server_rules_changed(w->data, NULL);
        return;
    }
    crier_info("serve", "stopping the HTTP API");
    ev_break(loop, EVBREAK_ALL);
}

/* --no-workers: the HTTP API runs on its threads; this thread waits for
 * SIGTERM/SIGINT (stop) and SIGHUP (reload the API's rules). */
static int serve_api_only(crier_http_server *api)
{
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    ev_signal term, intr, hup;
    if (!loop) {
        crier_cli_error("serve", "cannot create the event loop");
        return -1;
    }
    ev_signal_init(&term, serve_api_signal_cb, SIGTERM);
    ev_signal_init(&intr, serve_api_signal_cb, SIGINT);
    ev_signal_init(&hup, serve_api_signal_cb, SIGHUP);
    term.data = intr.data = hup.data = api;
    ev_signal_start(loop, &term);
    ev_signal_start(loop, &intr);
    ev_signal_start(loop, &hup);
    crier_info("serve", "serving the HTTP API only (--no-workers): other crier serve processes do the work");
    ev_run(loop, 0);
    ev_signal_stop(loop, &term);
    ev_signal_stop(loop, &intr);
    ev_signal_stop(loop, &hup);
    return 0;
}

int crier_cmd_serve(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            CLI_RULE_QUERY_OPTIONS,
                                            {"batch-size", required_argument, NULL, 'b'},
                                            {"delivery-batch", required_argument, NULL, 'd'},
                                            {"max-inflight", required_argument, NULL, 'm'},
                                            {"lease", required_argument, NULL, 'l'},
                                            {"poll", required_argument, NULL, 'p'},
                                            {"timeout-ms", required_argument, NULL, 't'},
                                            {"exit-when-idle", no_argument, NULL, 'x'},
                                            {"no-migrate", no_argument, NULL, 'n'},
                                            {"shutdown-deadline", required_argument, NULL, 'D'},
                                            {"event-attempts", required_argument, NULL, 'R'},
                                            {"slow-rule", required_argument, NULL, SERVE_OPT_SLOW_RULE},
                                            {"batch-budget", required_argument, NULL, SERVE_OPT_BATCH_BUDGET},
                                            {"copy-min", required_argument, NULL, SERVE_OPT_COPY_MIN},
                                            {"heartbeat", required_argument, NULL, SERVE_OPT_HEARTBEAT},
                                            {"no-workers", no_argument, NULL, SERVE_OPT_NO_WORKERS},
                                            {"no-deliver", no_argument, NULL, SERVE_OPT_NO_DELIVER},
                                            {"fanout-connections", required_argument, NULL, SERVE_OPT_FANOUT_CONNECTIONS},
                                            {"awake-poll", required_argument, NULL, SERVE_OPT_AWAKE_POLL},
                                            {"sleep-after", required_argument, NULL, SERVE_OPT_SLEEP_AFTER},
                                            {"linger", required_argument, NULL, SERVE_OPT_LINGER},
                                            {"linger-rate", required_argument, NULL, SERVE_OPT_LINGER_RATE},
                                            {"retain-events", required_argument, NULL, SERVE_OPT_RETAIN_EVENTS},
                                            {"retain-deliveries", required_argument, NULL, SERVE_OPT_RETAIN_DELIVERIES},
                                            {"retain-timers", required_argument, NULL, SERVE_OPT_RETAIN_TIMERS},
                                            {"retain-digests", required_argument, NULL, SERVE_OPT_RETAIN_DIGESTS},
                                            {"retain-throttle-hits", required_argument, NULL, SERVE_OPT_RETAIN_THROTTLE_HITS},
                                            {"retention-interval", required_argument, NULL, SERVE_OPT_RETENTION_INTERVAL},
                                            {"retention-batch", required_argument, NULL, SERVE_OPT_RETENTION_BATCH},
                                            {"pause-after", required_argument, NULL, 'P'},
                                            {"probe-interval", required_argument, NULL, 'I'},
                                            {"disable-after", required_argument, NULL, 'A'},
                                            {"smtp-url", required_argument, NULL, 'S'},
                                            {"smtp-user", required_argument, NULL, 'U'},
                                            {"email-from", required_argument, NULL, 'F'},
                                            {"kafka-brokers", required_argument, NULL, 'K'},
                                            {"allow-targets", required_argument, NULL, 'T'},
                                            {"ca-file", required_argument, NULL, SERVE_OPT_CA_FILE},
                                            {"http", required_argument, NULL, SERVE_OPT_HTTP},
                                            {"http-threads", required_argument, NULL, SERVE_OPT_HTTP_THREADS},
                                            {"http-max-body", required_argument, NULL, SERVE_OPT_HTTP_MAX_BODY},
                                            {"cors-origin", required_argument, NULL, SERVE_OPT_CORS_ORIGIN},
                                            {"healthz-max-lag", required_argument, NULL, SERVE_OPT_HEALTHZ_MAX_LAG},
                                            {"stream-keepalive", required_argument, NULL, SERVE_OPT_STREAM_KEEPALIVE},
                                            {"http-max-connections", required_argument, NULL, SERVE_OPT_HTTP_MAX_CONNECTIONS},
                                            {"http-max-per-address", required_argument, NULL, SERVE_OPT_HTTP_MAX_PER_ADDRESS},
                                            {"http-read-timeout", required_argument, NULL, SERVE_OPT_HTTP_READ_TIMEOUT},
                                            {"http-max-streams", required_argument, NULL, SERVE_OPT_HTTP_MAX_STREAMS},
                                            {"operator-key", required_argument, NULL, SERVE_OPT_OPERATOR_KEY},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    serve_args a;
    crier_engine_config *cfg = &a.cfg;
    crier_database db;
    crier_http_server *api = NULL;
    char err[16384];
    int rc = 1;

    /* first: the embedded PostgreSQL must not inherit NOTIFY_SOCKET */
    crier_sd_notify_init();
    crier_cli_init(&cli);
    memset(&a, 0, sizeof a);
    a.migrate = true;
    a.timeout_ms = 15000;
    cfg->poll_interval = 1.0;
    cfg->shutdown_deadline = 10.0;
    cfg->heartbeat_interval = 5.0;
    cfg->handle_signals = true;
    cfg->watch_rules = true;
    cfg->notify_service_manager = true;
    if (getenv("CRIER_HTTP") && *getenv("CRIER_HTTP") && serve_option(&a, SERVE_OPT_HTTP, getenv("CRIER_HTTP")) < 0) {
        rc = 2;
        goto out;
    }
    a.http.cors_origins = getenv("CRIER_CORS_ORIGIN");
    if (getenv("CRIER_OPERATOR_KEY") && *getenv("CRIER_OPERATOR_KEY") &&
        serve_option(&a, SERVE_OPT_OPERATOR_KEY, getenv("CRIER_OPERATOR_KEY")) < 0) {
        rc = 2;
        goto out;
    }
    if (getenv("CRIER_ALLOW_TARGETS")) {
        char why[256];
        if (crier_target_parse_allow(getenv("CRIER_ALLOW_TARGETS"), &cfg->webhook.allow_targets, why,
                                     sizeof why) < 0) {
            crier_cli_error("serve", "CRIER_ALLOW_TARGETS: %s", why);
            rc = 2;
            goto out;
        }
    }
    if (getenv("CRIER_CA_FILE") && *getenv("CRIER_CA_FILE") &&
        serve_option(&a, SERVE_OPT_CA_FILE, getenv("CRIER_CA_FILE")) < 0) {
        rc = 2;
        goto out;
    }
    if (crier_cli_parse(&cli, serve_help, argc, argv, options, serve_option, &a, &rc))
        goto out;
    rc = 2;
    if (optind < argc) {
        crier_cli_error("serve", "unexpected argument '%s' (see crier serve --help)", argv[optind]);
        goto out;
    }
    if (!cli.rules_given) {
        crier_cli_error("serve",
                        "which rules? give the directory of your rules: --rules DIR (or CRIER_RULES=DIR, or "
                        "rules = \"DIR\" in a --config file); crier check DIR validates them first.\n"
                        "To run the bundled example rules: --rules %s",
                        crier_cli_bundled_rules());
        goto out;
    }
    if (a.no_workers && !a.http.listen) {
        crier_cli_error("serve", "--no-workers serves the HTTP API only: give --http HOST:PORT too (or CRIER_HTTP)");
        goto out;
    }
    rc = 1;
    cfg->webhook.total_timeout_ms = a.timeout_ms;
    /* The rules must load (directory, Lua library, settings) before anything
     * touches the database: no cluster started, nothing migrated for a
     * command line that cannot run. */
    {
        crier_rules *rules = crier_cli_load_rules(&cli);
        if (!rules) {
            crier_cli_error("serve", "the rules in %s do not load: nothing was started or migrated", cli.rules_dir);
            goto out;
        }
        crier_rules_free(rules);
    }
    if (crier_database_open(cli.database, cli.data_dir, false, &db, err, sizeof err) < 0) {
        crier_cli_error("serve", "%s", err);
        goto out;
    }
    if (a.migrate ? serve_migrate(db.conninfo, err, sizeof err) < 0
                  : serve_check_schema(db.conninfo, err, sizeof err) < 0) {
        crier_cli_error("serve", "%s", err);
        crier_database_close(&db);
        goto out;
    }
    if (serve_check_rule_queries(&cli, &db) < 0) {
        crier_database_close(&db);
        goto out;
    }
    cfg->conninfo = db.conninfo;
    cfg->rules_conninfo = db.rules_conninfo;
    cfg->rules_query_role = crier_cli_rule_query_role(&cli);
    cfg->lua_dir = cli.lua_dir;
    cfg->rules_dir = cli.rules_dir;
    cfg->settings = cli.settings;
    cfg->n_settings = cli.n_settings;
    if (a.http.listen) {
        /* the API runs in its own threads beside the engine's loop; it reloads
         * its copy of the rules after the engine accepts a new version */
        a.http.conninfo = db.conninfo;
        a.http.lua_dir = cli.lua_dir;
        a.http.rules_dir = cli.rules_dir;
        a.http.settings = cli.settings;
        a.http.n_settings = cli.n_settings;
        /* this process's own first heartbeat comes after the API starts */
        a.http.worker_grace = a.no_workers ? 0 : 3 * cfg->heartbeat_interval + 2;
        api = crier_http_server_start(&a.http, err, sizeof err);
        if (!api) {
            crier_cli_error("serve", "%s", err);
            crier_database_close(&db);
            goto out;
        }
        cfg->on_rules_reloaded = crier_http_server_rules_changed;
        cfg->on_rules_reloaded_ud = api;
    }
    if (a.no_workers)
        rc = serve_api_only(api);
    else if (crier_engine_run(cfg, NULL, err, sizeof err) < 0)
        crier_cli_error("serve", "%s", err);
    else
        rc = 0;
    crier_http_server_stop(api, 5.0);
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}
