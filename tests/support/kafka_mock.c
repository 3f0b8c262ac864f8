/* kafka_mock.c — a librdkafka mock cluster in its own process, for the
 * integration tests: three brokers on real loopback TCP sockets, so that
 * `crier serve --kafka-brokers <bootstraps>` in another process produces to
 * them, driven by one-line commands on stdin.
 *
 * usage: kafka_mock BOOTSTRAP_FILE [TOPIC [PARTITIONS]]
 *   Creates TOPIC (default crier.notices) with PARTITIONS (default 3)
 *   partitions, replication factor 3, writes the bootstrap servers
 *   ("127.0.0.1:port,...") to BOOTSTRAP_FILE (atomically: written beside it,
 *   then renamed), then serves commands, one per line, each answered with one
 *   line on stdout (flushed):
 *     leader [TOPIC] PARTITION BROKER  partition leader (-1: none)  -> ok
 *     down BROKER / up BROKER          broker down or up (-1: all)  -> ok
 *     rtt BROKER MS                    answer requests MS late      -> ok
 *     consume TOPIC N TIMEOUT_MS FILE  reads TOPIC from the beginning with a
 *                                      fresh consumer until at least N records
 *                                      and the end of every partition (or the
 *                                      timeout); one line per record in FILE:
 *                                      "key partition offset idempotency-key
 *                                      value"                 -> done COUNT
 *                                                             or timeout COUNT
 *     ping                                                    -> ok
 *     quit (or end of input)           destroys the cluster and exits
 *   A bad command is answered "error: <why>".
 *
 * The mock cluster checks producer sequence numbers only for transactional
 * producers (see tests/unit/test_kafka.c): a batch it stored whose answer the
 * producer never read (a broker going down with requests in flight, a response
 * slower than the request timeout) is stored again when the producer retries
 * it, which a real broker would refuse. Tests that demand exactly-once take a
 * broker down only when it leads no partition. */
#define _GNU_SOURCE

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOCK_BROKERS "3"
#define MOCK_REPLICATION 3
#define MAX_PARTITIONS 256

static rd_kafka_mock_cluster_t *mc;
static const char *default_topic = "crier.notices";

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void reply(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* Parses a whole decimal integer. Returns 0 on success. */
static int parse_int(const char *s, long *out)
{
    char *end;

    if (!s || !*s)
        return -1;
    errno = 0;
    *out = strtol(s, &end, 10);
    return errno || *end ? -1 : 0;
}

/* Writes len bytes of p to f with control characters as '?'. */
static void write_printable(FILE *f, const void *p, size_t len)
{
    const unsigned char *c = p;
    size_t i;

    for (i = 0; i < len; i++)
        fputc(c[i] < 0x20 || c[i] == 0x7f ? '?' : c[i], f);
}

/* The number of partitions of topic, from the cluster's metadata; -1 if
 * unknown. */
static int topic_partitions(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int n = -1;

    if (!rkt)
        return -1;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
            n = md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(rkt);
    return n;
}

/* consume TOPIC N TIMEOUT_MS FILE */
static void cmd_consume(const char *topic, long want, long timeout_ms, const char *path)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *parts;
    FILE *out;
    int eof[MAX_PARTITIONS] = {0};
    int nparts = -1, p, at_end;
    long consumed = 0;
    double deadline = now_ms() + (double)timeout_ms;

    if (rd_kafka_conf_set(conf, "bootstrap.servers", rd_kafka_mock_cluster_bootstraps(mc), errstr,
                          sizeof errstr) ||
        rd_kafka_conf_set(conf, "group.id", "kafka-mock-consume", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "enable.partition.eof", "true", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "fetch.wait.max.ms", "10", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr)) {
        rd_kafka_conf_destroy(conf);
        reply("error: consumer config: %s", errstr);
        return;
    }
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        reply("error: consumer: %s", errstr);
        return;
    }
    while (nparts < 0 && now_ms() < deadline)
        nparts = topic_partitions(rk, topic);
    if (nparts <= 0 || nparts > MAX_PARTITIONS) {
        rd_kafka_destroy(rk);
        reply("error: topic %s: no partitions in the metadata", topic);
        return;
    }
    out = fopen(path, "w");
    if (!out) {
        rd_kafka_destroy(rk);
        reply("error: %s: %s", path, strerror(errno));
        return;
    }
    parts = rd_kafka_topic_partition_list_new(nparts);
    for (p = 0; p < nparts; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_topic_partition_list_destroy(parts);
        fclose(out);
        rd_kafka_destroy(rk);
        reply("error: assign failed");
        return;
    }
    rd_kafka_topic_partition_list_destroy(parts);

    for (;;) {
        rd_kafka_message_t *m;
        rd_kafka_headers_t *hdrs = NULL;
        const void *val = NULL;
        size_t val_size = 0;

        for (at_end = 1, p = 0; p < nparts; p++)
            at_end = at_end && eof[p];
        if ((consumed >= want && at_end) || now_ms() >= deadline)
            break;
        m = rd_kafka_consumer_poll(rk, 50);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (m->partition >= 0 && m->partition < nparts)
                eof[m->partition] = 1;
        } else if (m->err) {
            fprintf(stderr, "kafka_mock: consume error: %s\n", rd_kafka_message_errstr(m));
        } else {
            if (m->partition >= 0 && m->partition < nparts)
                eof[m->partition] = 0;
            consumed++;
            write_printable(out, m->key, m->key_len);
            fprintf(out, " %" PRId32 " %" PRId64 " ", m->partition, m->offset);
            if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                rd_kafka_header_get_last(hdrs, "idempotency-key", &val, &val_size) ==
                    RD_KAFKA_RESP_ERR_NO_ERROR && val_size > 0)
                write_printable(out, val, val_size);
            else
                fputc('-', out);
            fputc(' ', out);
            write_printable(out, m->payload, m->len);
            fputc('\n', out);
        }
        rd_kafka_message_destroy(m);
    }
    for (at_end = 1, p = 0; p < nparts; p++)
        at_end = at_end && eof[p];
    fclose(out);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    reply("%s %ld", consumed >= want && at_end ? "done" : "timeout", consumed);
}

/* Runs one command line. Returns 1 on quit. */
static int command(char *line)
{
    char *argv[8], *save = NULL, *tok;
    int argc = 0;
    long a, b, c;
    rd_kafka_resp_err_t err;

    for (tok = strtok_r(line, " \t\r\n", &save); tok && argc < 8; tok = strtok_r(NULL, " \t\r\n", &save))
        argv[argc++] = tok;
    if (argc == 0)
        return 0;
    if (!strcmp(argv[0], "quit"))
        return 1;
    if (!strcmp(argv[0], "ping") && argc == 1) {
        reply("ok");
    } else if (!strcmp(argv[0], "leader") && (argc == 3 || argc == 4)) {
        const char *topic = argc == 4 ? argv[1] : default_topic;
        if (parse_int(argv[argc - 2], &a) || parse_int(argv[argc - 1], &b)) {
            reply("error: leader [TOPIC] PARTITION BROKER");
            return 0;
        }
        err = rd_kafka_mock_partition_set_leader(mc, topic, (int32_t)a, (int32_t)b);
        if (err)
            reply("error: %s", rd_kafka_err2str(err));
        else
            reply("ok");
    } else if ((!strcmp(argv[0], "down") || !strcmp(argv[0], "up")) && argc == 2) {
        if (parse_int(argv[1], &a)) {
            reply("error: %s BROKER", argv[0]);
            return 0;
        }
        err = argv[0][0] == 'd' ? rd_kafka_mock_broker_set_down(mc, (int32_t)a)
                                : rd_kafka_mock_broker_set_up(mc, (int32_t)a);
        if (err)
            reply("error: %s", rd_kafka_err2str(err));
        else
            reply("ok");
    } else if (!strcmp(argv[0], "rtt") && argc == 3) {
        if (parse_int(argv[1], &a) || parse_int(argv[2], &b) || b < 0) {
            reply("error: rtt BROKER MS");
            return 0;
        }
        err = rd_kafka_mock_broker_set_rtt(mc, (int32_t)a, (int)b);
        if (err)
            reply("error: %s", rd_kafka_err2str(err));
        else
            reply("ok");
    } else if (!strcmp(argv[0], "consume") && argc == 5) {
        if (parse_int(argv[2], &b) || parse_int(argv[3], &c) || b < 0 || c < 0) {
            reply("error: consume TOPIC N TIMEOUT_MS FILE");
            return 0;
        }
        cmd_consume(argv[1], b, c, argv[4]);
    } else {
        reply("error: unknown command or wrong arguments: %s", argv[0]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    char errstr[512], tmp[4096], line[4096];
    rd_kafka_conf_t *conf;
    rd_kafka_t *rk;
    rd_kafka_resp_err_t err;
    long partitions = 3;
    FILE *f;

    if (argc < 2 || argc > 4 || (argc == 4 && (parse_int(argv[3], &partitions) || partitions < 1 ||
                                               partitions > MAX_PARTITIONS))) {
        fprintf(stderr, "usage: kafka_mock BOOTSTRAP_FILE [TOPIC [PARTITIONS]]\n");
        return 2;
    }
    if (argc >= 3)
        default_topic = argv[2];

    /* A producer handle whose only job is to own the mock cluster. */
    conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "test.mock.num.brokers", MOCK_BROKERS, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr)) {
        fprintf(stderr, "kafka_mock: config: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "kafka_mock: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    mc = rd_kafka_handle_mock_cluster(rk);
    if (!mc) {
        fprintf(stderr, "kafka_mock: no mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    err = rd_kafka_mock_topic_create(mc, default_topic, (int)partitions, MOCK_REPLICATION);
    if (err) {
        fprintf(stderr, "kafka_mock: topic %s: %s\n", default_topic, rd_kafka_err2str(err));
        rd_kafka_destroy(rk);
        return 1;
    }

    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", rd_kafka_mock_cluster_bootstraps(mc)) < 0 || fclose(f) != 0 ||
        rename(tmp, argv[1]) != 0) {
        fprintf(stderr, "kafka_mock: %s: %s\n", argv[1], strerror(errno));
        rd_kafka_destroy(rk);
        return 1;
    }
    fprintf(stderr, "kafka_mock: cluster at %s, topic %s (%ld partitions)\n",
            rd_kafka_mock_cluster_bootstraps(mc), default_topic, partitions);

    while (fgets(line, sizeof line, stdin))
        if (command(line))
            break;

    rd_kafka_destroy(rk);
    return 0;
}
