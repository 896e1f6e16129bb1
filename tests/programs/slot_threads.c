/*
 * Blocks released on another thread than the one that allocated them, while they sit
 * in their live slots (memtrack-ebpf's live_slots.rs): for memtrack-core/tests/
 * live_slots.rs.
 *
 *   slot_threads threads BLOCKS   the main thread and a worker each malloc BLOCKS
 *                         blocks (sizes 16 + i % 100; few enough that nearly all go
 *                         into their slots); each frees the other's, while the other
 *                         is parked; then each mallocs and frees one block of every
 *                         size again (the addresses the other released come back from
 *                         its own cache, or not: either way exact).
 *   slot_threads double   a block released twice in a row, and another released twice
 *                         with a call about a third block between (glibc's double-free
 *                         check defeated as in tests/fixtures/double_free.c: its
 *                         tcache key cleared; neither size is allocated again, as its
 *                         cache bin then holds a cycle): the second releases are
 *                         unmatched.
 *
 * The test and the program talk over two descriptors the test passes: the program
 * writes one byte to fd 3 when it reaches a step and reads one from fd 4 to go on. The
 * test turns counting on at the first step (the worker exists and waits: creating it
 * allocates, which is not counted) and off at the second. The program prints its own
 * calls between the two steps, as valgrind DHAT counts them (frees: the releases of a
 * live block; unmatched: the others):
 *   allocs=N frees=N bytes=N unmatched=N
 * and ends with _exit while the worker still waits: no thread exit frees glibc's
 * per-thread cache.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long blocks;
static void **mine, **theirs;
static unsigned long allocs, frees, bytes, unmatched;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_changed = PTHREAD_COND_INITIALIZER;
/* Whose turn: 0 the main thread's, 1 the worker's, 2 the worker parks for good. */
static int turn;

static void step(void)
{
    char c = 's';
    if (write(3, &c, 1) != 1 || read(4, &c, 1) != 1)
        _exit(20);
}

static void wait_turn(int who)
{
    pthread_mutex_lock(&lock);
    while (turn != who)
        pthread_cond_wait(&turn_changed, &lock);
    pthread_mutex_unlock(&lock);
}

static void give_turn(int to)
{
    pthread_mutex_lock(&lock);
    turn = to;
    pthread_cond_broadcast(&turn_changed);
    pthread_mutex_unlock(&lock);
}

static void fill(void **out)
{
    for (long i = 0; i < blocks; i++) {
        size_t n = 16 + i % 100;
        out[i] = malloc(n);
        if (out[i] == NULL)
            _exit(21);
        memset(out[i], 1, n);
        allocs++;
        bytes += n;
    }
}

static void release(void **in)
{
    for (long i = 0; i < blocks; i++) {
        free(in[i]);
        frees++;
    }
}

/* One block of every size, freed at once: the addresses the other thread released
 * may come back. */
static void churn(void)
{
    for (size_t n = 16; n < 116; n++) {
        void *p = malloc(n);
        if (p == NULL)
            _exit(22);
        allocs++;
        bytes += n;
        free(p);
        frees++;
    }
}

static void *worker(void *arg)
{
    (void)arg;
    wait_turn(1);
    fill(theirs);
    release(mine);
    churn();
    give_turn(0);
    wait_turn(2);
    return NULL;
}

/* glibc's tcache entry: the next pointer, then the key that marks the chunk as cached. */
__attribute__((noinline)) static void clear_cache_key(void *released)
{
    ((void *volatile *)released)[1] = NULL;
}

static void double_frees(void)
{
    void *a = malloc(72);
    void *b = malloc(88);
    if (a == NULL || b == NULL)
        _exit(24);
    allocs += 2;
    bytes += 72 + 88;
    free(a);
    clear_cache_key(a);
    free(a);
    free(b);
    void *c = malloc(200);
    if (c == NULL)
        _exit(25);
    allocs++;
    bytes += 200;
    free(c);
    clear_cache_key(b);
    free(b);
    frees += 3;
    unmatched += 2;
}

static void finish(void)
{
    step();
    char line[128];
    int len = snprintf(line, sizeof line, "allocs=%lu frees=%lu bytes=%lu unmatched=%lu\n",
                       allocs, frees, bytes, unmatched);
    if (write(1, line, len) != len)
        _exit(23);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "double") == 0) {
        step();
        double_frees();
        finish();
    }
    if (argc != 3 || strcmp(argv[1], "threads") != 0)
        return 2;
    blocks = atol(argv[2]);
    mine = calloc(blocks, sizeof(void *));
    theirs = calloc(blocks, sizeof(void *));
    if (mine == NULL || theirs == NULL)
        return 3;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 4;
    step();
    fill(mine);
    give_turn(1);
    wait_turn(0);
    release(theirs);
    churn();
    finish();
}
