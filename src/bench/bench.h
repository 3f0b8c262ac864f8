/* bench.h — `crier bench`, the benchmarks' entry point (bench.c) and each
 * benchmark's (bench_*.c).
 *
 * Layer: bench (src/bench/), above cli; may use cli, engine, api and below.
 * Nothing in the product links it but main.c. */
#ifndef CRIER_BENCH_H
#define CRIER_BENCH_H

/* `crier bench BENCHMARK [options]`: dispatches to one benchmark. Returns the
 * process exit status (2 for an unknown benchmark or no argument). */
int crier_cmd_bench(int argc, char **argv);

/* The benchmarks: argv[0] is the benchmark's name. Each returns the exit status. */
int crier_bench_fanout(int argc, char **argv);
int crier_bench_pipeline(int argc, char **argv);
int crier_bench_deliver(int argc, char **argv);
int crier_bench_feed(int argc, char **argv);
int crier_bench_timers(int argc, char **argv);
int crier_bench_soak(int argc, char **argv);

#endif
