/*
 * Throughput with contention on the probes' shared maps: THREADS threads each make OPS
 * malloc/free pairs (n = 64 + i % 100) at the same time.
 *
 *   threads THREADS [OPS]     (OPS per thread, default 1,000,000; 0 is the baseline)
 *
 * The timed region is the wall time from before the first pthread_create to after the
 * last pthread_join (thread start-up is microseconds against seconds of loop); ns_per_op
 * is that wall time / (THREADS * OPS), cpu_ns_per_op the CPU time of all threads over
 * the same region / (THREADS * OPS) (timing.h).
 *
 * glibc allocates on its own here, outside the loops: pthread_create callocs each
 * thread's DTV, and a thread that used malloc frees its tcache at exit (pointers the
 * tracker never saw allocated: unmatched frees, not releases). The runner therefore
 * compares alloc/free counts against a baseline run with the same THREADS and OPS = 0.
 */
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>

#define MAX_THREADS 64

static long ops_per_thread;

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < ops_per_thread; i++) {
        void *p = malloc(64 + i % 100);
        bench_sink = p;
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long long entered = bench_now_ns();
    long threads = bench_count_arg(argc, argv, 1, 8);
    ops_per_thread = bench_count_arg(argc, argv, 2, 1000000);
    bench_check(threads >= 1 && threads <= MAX_THREADS, "thread count (1..64)");
    pthread_t th[MAX_THREADS];
    pthread_attr_t attr;
    bench_check(pthread_attr_init(&attr) == 0, "pthread_attr_init");
    /* Small explicit stacks stay within glibc's stack cache whatever `ulimit -s` is. */
    bench_check(pthread_attr_setstacksize(&attr, 256 * 1024) == 0, "pthread_attr_setstacksize");
    struct bench_mark start = bench_mark();
    for (long t = 0; t < threads; t++)
        bench_check(pthread_create(&th[t], &attr, worker, NULL) == 0, "pthread_create");
    for (long t = 0; t < threads; t++)
        bench_check(pthread_join(th[t], NULL) == 0, "pthread_join");
    bench_report(entered, start, threads * ops_per_thread);
    pthread_attr_destroy(&attr);
    return 0;
}
