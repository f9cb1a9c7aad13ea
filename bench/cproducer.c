/*
 * The bench's C producer (bench/cproducer.py builds and runs it): RECORDS records of
 * RECORD_BYTES bytes to TOPIC through librdkafka, so that with small records the
 * client is not the limit the way a Python producer's per-record call is.
 *
 *   cproducer BOOTSTRAP TOPIC RECORDS RECORD_BYTES [librdkafka.property=value ...]
 *
 * It connects and learns the topic's leaders untimed, prints "ready", waits for a line
 * on stdin, produces, flushes, then prints one JSON line: records, bytes, monotonic
 * start/end, wall_s, cpu_s (the whole process: librdkafka's threads included),
 * records_per_s, mb_per_s, failures and the first failure.
 *
 * It is linked against the librdkafka that confluent-kafka's wheel bundles, which
 * ships no header; the few calls used here are declared below as librdkafka's
 * rdkafka.h has declared them since 1.x (unchanged in Debian's 2.0.2 and the wheel's
 * 2.x). Build with -DCPRODUCER_RDKAFKA_H to use a real rdkafka.h instead.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CPRODUCER_RDKAFKA_H
#include <librdkafka/rdkafka.h>
#else
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
struct rd_kafka_metadata;
typedef int rd_kafka_resp_err_t;
typedef int rd_kafka_conf_res_t;
typedef int rd_kafka_type_t;
typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;
#define RD_KAFKA_PRODUCER 0
#define RD_KAFKA_CONF_OK 0
#define RD_KAFKA_PARTITION_UA ((int32_t)-1)
#define RD_KAFKA_MSG_F_COPY 0x2
#define RD_KAFKA_RESP_ERR__QUEUE_FULL (-184)
#define RD_KAFKA_RESP_ERR_NO_ERROR 0

rd_kafka_conf_t *rd_kafka_conf_new(void);
rd_kafka_conf_res_t rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name,
                                      const char *value, char *errstr, size_t errstr_size);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *conf,
                                 void (*dr_msg_cb)(rd_kafka_t *rk,
                                                   const rd_kafka_message_t *rkmessage,
                                                   void *opaque));
rd_kafka_t *rd_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr,
                         size_t errstr_size);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic,
                                     rd_kafka_topic_conf_t *conf);
rd_kafka_resp_err_t rd_kafka_metadata(rd_kafka_t *rk, int all_topics,
                                      rd_kafka_topic_t *only_rkt,
                                      const struct rd_kafka_metadata **metadatap,
                                      int timeout_ms);
void rd_kafka_metadata_destroy(const struct rd_kafka_metadata *metadata);
int rd_kafka_produce(rd_kafka_topic_t *rkt, int32_t partition, int msgflags, void *payload,
                     size_t len, const void *key, size_t keylen, void *msg_opaque);
rd_kafka_resp_err_t rd_kafka_last_error(void);
const char *rd_kafka_err2str(rd_kafka_resp_err_t err);
int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_flush(rd_kafka_t *rk, int timeout_ms);
int rd_kafka_outq_len(rd_kafka_t *rk);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
void rd_kafka_destroy(rd_kafka_t *rk);
#endif

/* How long connecting, the final flush and closing may each take. */
#define CONNECT_TIMEOUT_MS 60000
#define FLUSH_TIMEOUT_MS 300000

static long failures;
static char first_failure[256];

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
    if (failures++ == 0)
        snprintf(first_failure, sizeof first_failure, "%s", rd_kafka_err2str(m->err));
}

static double seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, const char *why) {
    fprintf(stderr, "cproducer: %s: %s\n", what, why);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC RECORDS RECORD_BYTES [property=value ...]\n",
                argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    long records = strtol(argv[3], NULL, 10);
    long record_bytes = strtol(argv[4], NULL, 10);
    if (records < 0 || record_bytes < 0) return fail("arguments", "negative count or size");
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK)
        return fail("bootstrap.servers", errstr);
    /* Only failures call back: a callback per record would be the client's own cost. */
    if (rd_kafka_conf_set(conf, "delivery.report.only.error", "true", errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK)
        return fail("delivery.report.only.error", errstr);
    for (int i = 5; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) return fail(argv[i], "expected property=value");
        *eq = '\0';
        if (rd_kafka_conf_set(conf, argv[i], eq + 1, errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
            return fail(argv[i], errstr);
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) return fail("rd_kafka_new", errstr);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (rkt == NULL) return fail("rd_kafka_topic_new", rd_kafka_err2str(rd_kafka_last_error()));
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, CONNECT_TIMEOUT_MS);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return fail("metadata", rd_kafka_err2str(err));
    rd_kafka_metadata_destroy(md);

    char *value = malloc(record_bytes > 0 ? (size_t)record_bytes : 1);
    if (value == NULL) return fail("malloc", "out of memory");
    /* Random bytes, as the Python producers send (os.urandom): nothing compresses. */
    FILE *urandom = fopen("/dev/urandom", "rb");
    if (urandom == NULL || fread(value, 1, (size_t)record_bytes, urandom) != (size_t)record_bytes)
        return fail("/dev/urandom", "cannot read");
    fclose(urandom);

    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) return fail("stdin", "closed before go");

    double start = seconds(CLOCK_MONOTONIC), cpu0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < records; i++) {
        while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, value,
                                (size_t)record_bytes, NULL, 0, NULL) == -1) {
            err = rd_kafka_last_error();
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return fail("produce", rd_kafka_err2str(err));
            rd_kafka_poll(rk, 1);
        }
        if ((i & 0x3FFF) == 0) rd_kafka_poll(rk, 0);
    }
    err = rd_kafka_flush(rk, FLUSH_TIMEOUT_MS);
    double end = seconds(CLOCK_MONOTONIC), cpu_s = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    long undelivered = rd_kafka_outq_len(rk);
    double wall_s = end - start, bytes = (double)records * (double)record_bytes;
    printf("{\"records\": %ld, \"bytes\": %.0f, \"start\": %.6f, \"end\": %.6f, "
           "\"wall_s\": %.6f, \"cpu_s\": %.6f, \"records_per_s\": %.1f, \"mb_per_s\": %.3f, "
           "\"failures\": %ld, \"undelivered\": %ld, \"first_failure\": \"%s\"}\n",
           records, bytes, start, end, wall_s, cpu_s, wall_s > 0 ? records / wall_s : 0.0,
           wall_s > 0 ? bytes / wall_s / 1e6 : 0.0, failures, undelivered, first_failure);
    fflush(stdout);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(value);
    return failures || undelivered || err != RD_KAFKA_RESP_ERR_NO_ERROR ? 1 : 0;
}
