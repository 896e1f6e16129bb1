/*
 * An address that comes back while an older entry of it is still in the live-block
 * maps, once the map of the later preallocated entries exists (memtrack-ebpf's
 * live_maps.rs, "Newest first"): for memtrack-core/tests/live_on_demand.rs.
 *
 *   live_shadow stale    keeps 70,000 blocks live (so the tracker reserves its later
 *                        entries and the newest blocks go there), then, at the test's
 *                        word, frees one of its first blocks (an entry of the first
 *                        map) while the test has counting off, and mallocs again: the
 *                        allocator hands the same address back, and the new block goes
 *                        to the newer map while the old entry stays.
 *   live_shadow thread   (with glibc.malloc.arena_max=1) thread A mallocs 8 blocks of
 *                        32 bytes early (entries of the first map); after 70,000 more
 *                        blocks, A frees its 8 (7 go to its thread cache, the 8th to
 *                        the arena's fast bin, and stays A's last release: a tombstone
 *                        of the first map), and thread B, whose cache is empty, mallocs
 *                        32 bytes and gets that 8th address from the fast bin: a new
 *                        block in the newer map while A's tombstone is in the older one.
 *                        B frees it, A makes another call (deleting its last release),
 *                        and the process frees everything.
 *
 * The test and the program talk over two descriptors the test passes: the program
 * writes one byte to fd 3 when it reaches a step and reads one from fd 4 to go on.
 * Each mode prints `reused=1` when the allocator handed the address back (the test
 * needs it: otherwise it saw nothing), then its own counts:
 *   reused=N allocs=N frees=N
 * (the calls this program made; in `stale` mode the free made with counting off is not
 * among them). The process ends with _exit while its threads still run: no thread
 * exit frees glibc's per-thread caches.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BLOCKS 70000

static unsigned long allocs, frees;

static void step(void)
{
    char c = 's';
    if (write(3, &c, 1) != 1 || read(4, &c, 1) != 1)
        _exit(20);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* BLOCKS blocks of 48 bytes, with a pause after the first 20,000 for the tracker to
 * reserve its later entries (it does at 16,384 live blocks). */
static void **hold(void)
{
    void **p = mmap(NULL, BLOCKS * sizeof *p, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        _exit(21);
    for (long i = 0; i < BLOCKS; i++) {
        if (i == 20000)
            pause_ms(400);
        if (!(p[i] = malloc(48)))
            _exit(22);
        allocs++;
    }
    return p;
}

static void release(void **p)
{
    for (long i = 0; i < BLOCKS; i++) {
        if (p[i]) {
            free(p[i]);
            frees++;
        }
    }
}

static int stale(void)
{
    /* The first block: an entry of the first map. */
    void *x = malloc(40);
    if (!x)
        _exit(23);
    allocs++;
    void **p = hold();
    step(); /* the test turns counting off */
    free(x);
    step(); /* the test turns counting on */
    /* Another size of the same size class: the address comes back, and a release
     * found at the wrong entry would show in the bytes. */
    void *y = malloc(36);
    if (!y)
        _exit(24);
    allocs++;
    int reused = y == x;
    free(y);
    frees++;
    release(p);
    return reused;
}

static void *a_blocks[8];
static void *b_block;
static int phase;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static void wait_phase(int want)
{
    pthread_mutex_lock(&lock);
    while (phase < want)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void set_phase(int to)
{
    pthread_mutex_lock(&lock);
    phase = to;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void *thread_a(void *arg)
{
    (void)arg;
    for (int i = 0; i < 8; i++) {
        if (!(a_blocks[i] = malloc(32)))
            _exit(25);
        __atomic_add_fetch(&allocs, 1, __ATOMIC_SEQ_CST);
    }
    set_phase(1);
    wait_phase(2);
    for (int i = 0; i < 8; i++) {
        free(a_blocks[i]);
        __atomic_add_fetch(&frees, 1, __ATOMIC_SEQ_CST);
    }
    set_phase(3);
    wait_phase(4);
    /* Another call: deletes A's last release (or finds B's newer entry there). */
    void *other = malloc(200);
    if (!other)
        _exit(26);
    __atomic_add_fetch(&allocs, 1, __ATOMIC_SEQ_CST);
    free(other);
    __atomic_add_fetch(&frees, 1, __ATOMIC_SEQ_CST);
    set_phase(5);
    for (;;)
        pause();
    return NULL;
}

static void *thread_b(void *arg)
{
    (void)arg;
    wait_phase(3);
    if (!(b_block = malloc(32)))
        _exit(27);
    __atomic_add_fetch(&allocs, 1, __ATOMIC_SEQ_CST);
    free(b_block);
    __atomic_add_fetch(&frees, 1, __ATOMIC_SEQ_CST);
    set_phase(4);
    for (;;)
        pause();
    return NULL;
}

static int threads(void)
{
    pthread_t a, b;
    /* Both threads exist before anything is counted of this mode's own calls. */
    if (pthread_create(&a, NULL, thread_a, NULL) || pthread_create(&b, NULL, thread_b, NULL))
        _exit(28);
    wait_phase(1);
    void **p = hold();
    set_phase(2);
    wait_phase(5);
    int reused = b_block == a_blocks[7];
    release(p);
    return reused;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    int reused;
    if (strcmp(argv[1], "stale") == 0)
        reused = stale();
    else if (strcmp(argv[1], "thread") == 0)
        reused = threads();
    else
        return 2;
    char line[128];
    int len = snprintf(line, sizeof line, "reused=%d allocs=%lu frees=%lu\n", reused, allocs,
                       frees);
    if (write(1, line, len) != len)
        _exit(29);
    _exit(0);
}
