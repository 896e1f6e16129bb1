/* Threads allocating from one stack at the same moment, for the per-stack maximum's test
 * (memtrack-core/tests/kernel_stacks.rs), built with -O2 -g -fomit-frame-pointer:
 *
 *   worker -> take x (r + 1) -> malloc(24)      r = 0 .. ROUNDS - 1, one stack per r
 *
 *   racing_max
 *
 * THREADS workers meet (spinning) before each round r, then each allocates PER
 * blocks of 24 bytes from the stack of depth r and keeps them: every allocation raises
 * that stack's live bytes to a new maximum, from both threads at once. main frees every
 * block after the workers are joined. So each of the ROUNDS stacks has THREADS * PER
 * blocks allocated and freed, and its most bytes live at once are all of them:
 * THREADS * PER * 24, in THREADS * PER blocks. A maximum (or its blocks) written
 * without a compare-and-swap could be overwritten by the other thread's older one, at
 * the end of a round.
 *
 * noipa keeps take a real recursive function; the store to `sink` after the recursive
 * call keeps it from being a tail call. */
#include <pthread.h>
#include <stdlib.h>

#define THREADS 2
#define ROUNDS 40
#define PER 4
#define SIZE 24

volatile long sink;
static volatile int arrived, round_open;
static void *blocks[ROUNDS][THREADS][PER];

__attribute__((noipa)) void take(int depth, int round, int thread) {
    if (depth > 0) {
        take(depth - 1, round, thread);
        sink = depth;
        return;
    }
    for (int i = 0; i < PER; i++)
        blocks[round][thread][i] = malloc(SIZE);
}

/* Both workers spin until round r opens (the last to arrive opens it), so they start
 * their allocations within nanoseconds of each other: a futex barrier would wake one
 * microseconds after the other. */
static void meet(int r) {
    if (__atomic_add_fetch(&arrived, 1, __ATOMIC_SEQ_CST) == THREADS * (r + 1))
        __atomic_store_n(&round_open, r + 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&round_open, __ATOMIC_SEQ_CST) <= r)
        ;
}

static void *worker(void *arg) {
    int thread = (int)(long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        meet(r);
        take(r, r, thread);
    }
    return NULL;
}

int main(void) {
    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++)
        if (pthread_create(&threads[t], NULL, worker, (void *)t) != 0)
            return 1;
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    for (int r = 0; r < ROUNDS; r++)
        for (int t = 0; t < THREADS; t++)
            for (int i = 0; i < PER; i++)
                free(blocks[r][t][i]);
    return 0;
}
