/*
 * Single-threaded allocator loops, one per allocation function memtrack probes.
 *
 *   alloc_loops MODE [OPS] [HOLD]   (OPS defaults to 1,000,000; 0 runs no loop: the
 *                                   baseline; HOLD, default 0: blocks of 32 bytes
 *                                   allocated before the timed loop and freed after it,
 *                                   live throughout, so that the loop's blocks find the
 *                                   tracker's preallocated live-block entries taken)
 *
 * MODE and what one operation is (n = 64 + i % 100, so several tcache bins are used):
 *   malloc_free    p = malloc(n); free(p);
 *   calloc_free    p = calloc(1, n); free(p);
 *   realloc_grow   p = malloc(n); p = realloc(p, n + 448); free(p);
 *   memalign_free  posix_memalign(&p, 64, n); free(p);
 *   malloc_split   the malloc_free calls, in batches of 1000 mallocs then 1000 frees,
 *                  timing the mallocs and the frees apart: prints ns_per_malloc and
 *                  ns_per_free (and their cpu_ counterparts) besides ns_per_op, to show
 *                  which probe costs what. Not the same glibc fast path as malloc_free (the tcache holds 7
 *                  chunks per size), so compare it tracked against untracked only.
 *   getppid        syscall(SYS_getppid): no allocation, one system call, to measure
 *                  what memtrack's syscall counter costs processes it does not track.
 *   page_faults    touches one new page of an anonymous mapping per operation (a page
 *                  fault, which changes the process's resident memory: the kernel's
 *                  rss_stat tracepoint fires), 4,096 pages a mapping, unmapped after:
 *                  what the timeline's RSS tracepoint costs processes it does not track.
 *
 * Prints the ns per operation of the timed loop (see timing.h). The runner derives the
 * exact counts each mode must add to a tracked run from the same formulas.
 */
#define _GNU_SOURCE
#include "timing.h"

#include <sys/mman.h>
#include <sys/syscall.h>

static void malloc_free(long ops)
{
    for (long i = 0; i < ops; i++) {
        void *p = malloc(64 + i % 100);
        bench_sink = p;
        free(p);
    }
}

static void calloc_free(long ops)
{
    for (long i = 0; i < ops; i++) {
        void *p = calloc(1, 64 + i % 100);
        bench_sink = p;
        free(p);
    }
}

static void realloc_grow(long ops)
{
    for (long i = 0; i < ops; i++) {
        void *p = malloc(64 + i % 100);
        bench_sink = p;
        void *q = realloc(p, 64 + i % 100 + 448);
        bench_check(q != NULL, "realloc");
        bench_sink = q;
        free(q);
    }
}

static void memalign_free(long ops)
{
    for (long i = 0; i < ops; i++) {
        void *p;
        bench_check(posix_memalign(&p, 64, 64 + i % 100) == 0, "posix_memalign");
        bench_sink = p;
        free(p);
    }
}

static void getppid_loop(long ops)
{
    for (long i = 0; i < ops; i++)
        bench_sink = (void *)syscall(SYS_getppid);
}

enum { FAULT_PAGES = 4096, PAGE = 4096 };

static void page_faults(long ops)
{
    for (long done = 0; done < ops;) {
        long n = ops - done < FAULT_PAGES ? ops - done : FAULT_PAGES;
        char *m = mmap(NULL, (size_t)n * PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        bench_check(m != MAP_FAILED, "mmap");
        for (long j = 0; j < n; j++)
            m[j * PAGE] = 1;
        munmap(m, (size_t)n * PAGE);
        done += n;
    }
}

enum { SPLIT_BATCH = 1000 };

static void malloc_split(long ops)
{
    static void *batch[SPLIT_BATCH];
    long long malloc_ns = 0, free_ns = 0, malloc_cpu = 0, free_cpu = 0;
    for (long done = 0; done < ops;) {
        long n = ops - done < SPLIT_BATCH ? ops - done : SPLIT_BATCH;
        struct bench_mark t0 = bench_mark();
        for (long j = 0; j < n; j++)
            batch[j] = malloc(64 + (done + j) % 100);
        struct bench_mark t1 = bench_mark();
        for (long j = 0; j < n; j++)
            free(batch[j]);
        struct bench_mark t2 = bench_mark();
        malloc_ns += t1.wall_ns - t0.wall_ns;
        free_ns += t2.wall_ns - t1.wall_ns;
        malloc_cpu += t1.cpu_ns - t0.cpu_ns;
        free_cpu += t2.cpu_ns - t1.cpu_ns;
        done += n;
    }
    double per = ops > 0 ? 1.0 / (double)ops : 0.0;
    bench_field("ns_per_malloc", (double)malloc_ns * per);
    bench_field("ns_per_free", (double)free_ns * per);
    bench_field("cpu_ns_per_malloc", (double)malloc_cpu * per);
    bench_field("cpu_ns_per_free", (double)free_cpu * per);
}

int main(int argc, char **argv)
{
    long long entered = bench_now_ns();
    static const struct {
        const char *name;
        void (*loop)(long);
    } modes[] = {
        {"malloc_free", malloc_free},
        {"calloc_free", calloc_free},
        {"realloc_grow", realloc_grow},
        {"memalign_free", memalign_free},
        {"malloc_split", malloc_split},
        {"getppid", getppid_loop},
        {"page_faults", page_faults},
    };
    if (argc < 2) {
        static const char usage[] = "usage: alloc_loops MODE [OPS]\n";
        (void)!write(2, usage, sizeof usage - 1);
        return 2;
    }
    long ops = bench_count_arg(argc, argv, 2, 1000000);
    long hold = bench_count_arg(argc, argv, 3, 0);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        if (strcmp(argv[1], modes[m].name) == 0) {
            void **held = hold > 0 ? calloc((size_t)hold, sizeof *held) : NULL;
            bench_check(hold == 0 || held != NULL, "calloc");
            for (long i = 0; i < hold; i++) {
                held[i] = malloc(32);
                bench_check(held[i] != NULL, "malloc");
            }
            struct bench_mark start = bench_mark();
            modes[m].loop(ops);
            bench_report(entered, start, ops);
            for (long i = 0; i < hold; i++)
                free(held[i]);
            free(held);
            return 0;
        }
    }
    static const char unknown[] = "unknown mode\n";
    (void)!write(2, unknown, sizeof unknown - 1);
    return 2;
}
