/*
 * Allocator loops at the bottom of a deep call stack, for the cost of in-kernel stacks
 * (memtrack-benches --only stacks):
 *
 *   deep_loops MODE LEVELS [OPS]    (OPS defaults to 1,000,000; 0 runs no loop)
 *
 * main calls descend(LEVELS), which recurses LEVELS times and runs the loop in
 * descend(0): every allocation's stack is malloc's caller (descend), LEVELS more frames
 * of descend, then main and the C library's start-up frames, so a depth limit of 64
 * really walks 64 frames when LEVELS is at least 64. Every allocation of a run has the
 * same stack. MODE is one of alloc_loops' modes:
 *   malloc_free    p = malloc(n); free(p);        (n = 64 + i % 100)
 *   malloc_split   the same calls in batches of 1000 mallocs then 1000 frees, timed
 *                  apart (ns_per_malloc, ns_per_free and their cpu_ counterparts).
 *
 * Built like the other workloads (-O2): noipa keeps descend a real, non-inlined frame,
 * and the store to `depth_sink` after the call keeps the recursion from being a tail
 * call, so every level leaves a return address.
 */
#include "timing.h"

enum { SPLIT_BATCH = 1000 };

static volatile int depth_sink;
static const char *mode;
static long ops;
static long long malloc_ns, free_ns, malloc_cpu, free_cpu;

static void malloc_free(void)
{
    for (long i = 0; i < ops; i++) {
        void *p = malloc(64 + i % 100);
        bench_sink = p;
        free(p);
    }
}

static void malloc_split(void)
{
    static void *batch[SPLIT_BATCH];
    for (long done = 0; done < ops;) {
        long n = ops - done < SPLIT_BATCH ? ops - done : SPLIT_BATCH;
        struct bench_mark a = bench_mark();
        for (long j = 0; j < n; j++) {
            batch[j] = malloc(64 + (done + j) % 100);
            bench_check(batch[j] != NULL, "malloc");
        }
        struct bench_mark b = bench_mark();
        for (long j = 0; j < n; j++)
            free(batch[j]);
        struct bench_mark c = bench_mark();
        malloc_ns += b.wall_ns - a.wall_ns;
        malloc_cpu += b.cpu_ns - a.cpu_ns;
        free_ns += c.wall_ns - b.wall_ns;
        free_cpu += c.cpu_ns - b.cpu_ns;
        done += n;
    }
}

__attribute__((noipa)) static void descend(int n)
{
    if (n == 0) {
        if (strcmp(mode, "malloc_free") == 0)
            malloc_free();
        else
            malloc_split();
    } else {
        descend(n - 1);
    }
    depth_sink = n;
}

int main(int argc, char **argv)
{
    long long entered = bench_now_ns();
    if (argc < 3 || (strcmp(argv[1], "malloc_free") != 0 && strcmp(argv[1], "malloc_split") != 0)) {
        static const char msg[] = "usage: deep_loops malloc_free|malloc_split LEVELS [OPS]\n";
        (void)!write(2, msg, sizeof msg - 1);
        return 2;
    }
    mode = argv[1];
    int levels = (int)bench_count_arg(argc, argv, 2, 0);
    ops = bench_count_arg(argc, argv, 3, 1000000);
    struct bench_mark from = bench_mark();
    descend(levels);
    if (strcmp(mode, "malloc_split") == 0 && ops > 0) {
        bench_field("ns_per_malloc", (double)malloc_ns / (double)ops);
        bench_field("cpu_ns_per_malloc", (double)malloc_cpu / (double)ops);
        bench_field("ns_per_free", (double)free_ns / (double)ops);
        bench_field("cpu_ns_per_free", (double)free_cpu / (double)ops);
    }
    bench_report(entered, from, ops);
    return 0;
}
