/*
 * Shared by the benchmark workloads: arguments, the clock, and the result line, all
 * without allocating. A workload makes no allocator call outside its timed loop except
 * what glibc does on its own, so a tracked run's counters are exactly "baseline run +
 * what the loop did" (the runner checks that number by number).
 *
 * Output: one line on stdout of space-separated key=value fields, e.g.
 *   ns_per_op=14.612 cpu_ns_per_op=14.600 elapsed_ns=14612000 cpu_ns=... start_ns=...
 * ns_per_op is wall time (CLOCK_MONOTONIC) per operation; cpu_ns_per_op is the CPU time
 * of all the process's threads (CLOCK_PROCESS_CPUTIME_ID, user + kernel: probe handlers
 * run in the kernel on the calling thread) per operation, which other load on the
 * machine does not inflate.
 * start_ns/end_ns are CLOCK_MONOTONIC at main's entry and at the report, so the runner
 * can tell how long a tracked command took to reach main and how long after its end the
 * tracker noticed. Written with write(2) from a static buffer: stdio would malloc.
 */
#ifndef MEMTRACK_BENCH_TIMING_H
#define MEMTRACK_BENCH_TIMING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Keeps the compiler from eliding an allocation whose result is otherwise unused. */
static void *volatile bench_sink;

static char bench_line[512];
static size_t bench_len;

static inline long long bench_clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline long long bench_now_ns(void)
{
    return bench_clock_ns(CLOCK_MONOTONIC);
}

/* The start of a timed region: wall and process CPU time. */
struct bench_mark {
    long long wall_ns;
    long long cpu_ns;
};

static inline struct bench_mark bench_mark(void)
{
    struct bench_mark m = {bench_now_ns(), bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID)};
    return m;
}

/* argv[i] as a non-negative count, or `fallback` when absent; exits 2 on garbage. */
static inline long bench_count_arg(int argc, char **argv, int i, long fallback)
{
    if (argc <= i)
        return fallback;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < 0) {
        static const char msg[] = "bad count argument\n";
        (void)!write(2, msg, sizeof msg - 1);
        exit(2);
    }
    return v;
}

/* Appends "key=value " to the result line. */
static inline void bench_field(const char *key, double value)
{
    if (bench_len < sizeof bench_line) {
        int n = snprintf(bench_line + bench_len, sizeof bench_line - bench_len, "%s=%.3f ",
                         key, value);
        if (n > 0)
            bench_len += (size_t)n;
    }
}

/* Ends the timed region begun at `from` and writes the result line. `entered_ns` is
 * main's first clock reading. ops == 0 (the baseline run) reports 0 per op. */
static inline void bench_report(long long entered_ns, struct bench_mark from, long ops)
{
    struct bench_mark to = bench_mark();
    double wall = (double)(to.wall_ns - from.wall_ns);
    double cpu = (double)(to.cpu_ns - from.cpu_ns);
    bench_field("ns_per_op", ops > 0 ? wall / (double)ops : 0.0);
    bench_field("cpu_ns_per_op", ops > 0 ? cpu / (double)ops : 0.0);
    bench_field("elapsed_ns", wall);
    bench_field("cpu_ns", cpu);
    bench_field("start_ns", (double)entered_ns);
    bench_field("end_ns", (double)to.wall_ns);
    if (bench_len >= sizeof bench_line)
        bench_len = sizeof bench_line - 1;
    bench_line[bench_len > 0 ? bench_len - 1 : 0] = '\n';
    (void)!write(1, bench_line, bench_len > 0 ? bench_len : 1);
}

/* Exits 1 with a message when an allocation failed: a benchmark must not time errors. */
static inline void bench_check(int ok, const char *what)
{
    if (!ok) {
        (void)!write(2, what, strlen(what));
        (void)!write(2, " failed\n", 8);
        exit(1);
    }
}

#endif
