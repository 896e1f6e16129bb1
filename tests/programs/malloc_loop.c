/*
 * A malloc/free loop that times itself: `malloc_loop [PAIRS]` does PAIRS (default
 * 1,000,000) pairs of p = malloc(64 + i % 100); free(p); and prints the nanoseconds per
 * pair (CLOCK_MONOTONIC) on stdout. Used to measure probe costs and to check that an
 * untracked process runs at native speed while a tracker is attached elsewhere.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile sink;

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < pairs; i++) {
        void *p = malloc(64 + i % 100);
        sink = p;
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("%.3f\n", ns / pairs);
    return 0;
}
