/* test_bench_util.c — the benchmarks' arithmetic: the quantile of a
 * histogram's observations between two readings (crier bench soak's lag p99
 * from crier_delivery_latency_seconds). */
#include "bench_util.h"
#include "check.h"

#include <math.h>

#define N 5
static const double LE[N] = {0.001, 0.05, 0.1, 0.5, INFINITY};

static void test_one_bucket(void)
{
    double before[N] = {0}, after[N] = {0, 0, 100, 0, 0};
    /* all in (0.05, 0.1]: 99 % of the way from 0.05 to 0.1 */
    CHECK(fabs(crier_bench_histogram_quantile(LE, before, after, N, 0.99) - 0.0995) < 1e-12);
    CHECK(fabs(crier_bench_histogram_quantile(LE, before, after, N, 0.5) - 0.075) < 1e-12);
}

static void test_tail_bucket(void)
{
    double before[N] = {0}, after[N] = {98, 0, 0, 2, 0};
    /* the 99th of 100 is the first of the two in (0.1, 0.5]: halfway */
    CHECK(fabs(crier_bench_histogram_quantile(LE, before, after, N, 0.99) - 0.3) < 1e-12);
    /* the first bucket starts at 0 */
    CHECK(fabs(crier_bench_histogram_quantile(LE, before, after, N, 0.49) - 0.0005) < 1e-12);
}

static void test_between_readings(void)
{
    /* only what was added between the readings counts */
    double before[N] = {1000, 500, 0, 0, 0}, after[N] = {1000, 500, 0, 10, 0};
    CHECK(fabs(crier_bench_histogram_quantile(LE, before, after, N, 0.99) - (0.1 + 0.4 * 0.99)) < 1e-12);
}

static void test_inf_and_empty(void)
{
    double before[N] = {0}, inf[N] = {0, 0, 0, 0, 7}, same[N] = {3, 0, 0, 0, 0};
    /* past the last finite bound: that bound */
    CHECK(crier_bench_histogram_quantile(LE, before, inf, N, 0.99) == 0.5);
    /* nothing observed in between */
    CHECK(isnan(crier_bench_histogram_quantile(LE, same, same, N, 0.99)));
}

int main(void)
{
    test_one_bucket();
    test_tail_bucket();
    test_between_readings();
    test_inf_and_empty();
    return CHECK_DONE();
}
