/* http_sink.c — loopback HTTP receiver recording webhook-ids (see http_sink.h). */
#include "http_sink.h"
#include "alloc.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crier_http_sink {
    struct MHD_Daemon *daemon;
    unsigned port;
    pthread_mutex_t lock;
    char **ids;
    size_t n_ids, cap_ids;
};

static void sink_record(crier_http_sink *s, const char *id)
{
    pthread_mutex_lock(&s->lock);
    if (s->n_ids == s->cap_ids) {
        size_t cap = s->cap_ids ? s->cap_ids * 2 : 256;
        char **p = crier_xrealloc(s->ids, cap * sizeof *p);
        s->ids = p;
        s->cap_ids = cap;
    }
    s->ids[s->n_ids] = crier_xstrdup(id ? id : "");
    s->n_ids++;
    pthread_mutex_unlock(&s->lock);
}

static enum MHD_Result sink_handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                    const char *version, const char *upload_data, size_t *upload_data_size,
                                    void **con_cls)
{
    static int started;
    crier_http_sink *s = cls;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;

    if (*con_cls == NULL) {
        *con_cls = &started; /* first call: headers only */
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0; /* the body is not needed: discard it */
        return MHD_YES;
    }
    sink_record(s, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "webhook-id"));
    resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    ret = MHD_queue_response(conn, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

crier_http_sink *crier_http_sink_start(char *err, size_t err_len)
{
    crier_http_sink *s = calloc(1, sizeof *s);
    struct sockaddr_in addr;
    const union MHD_DaemonInfo *info;

    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* poll(), not epoll: with epoll a burst of connects (256 sends at once)
     * could leave some in the listen queue unaccepted until the next connect
     * came (a clean-clone run saw 78 sends time out after 15 s with 0 bytes
     * received); poll is level-triggered. */
    s->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, sink_handler, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)4096, MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, err_len, "cannot start the local HTTP receiver on 127.0.0.1");
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    return s;
}

unsigned crier_http_sink_port(const crier_http_sink *s)
{
    return s->port;
}

char **crier_http_sink_ids(crier_http_sink *s, size_t *n)
{
    char **out;
    pthread_mutex_lock(&s->lock);
    out = crier_xcalloc(s->n_ids + 1, sizeof *out);
    for (size_t i = 0; i < s->n_ids; i++) {
        out[i] = crier_xstrdup(s->ids[i]);
    }
    *n = s->n_ids;
    pthread_mutex_unlock(&s->lock);
    return out;
}

void crier_http_sink_stop(crier_http_sink *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    for (size_t i = 0; i < s->n_ids; i++)
        free(s->ids[i]);
    free(s->ids);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
