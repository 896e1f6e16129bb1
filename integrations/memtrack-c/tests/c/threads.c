/*
 * libmemtrack from several threads at once, under `memtrack run`: THREADS threads race
 * to make ROUNDS regions each. A thread that gets the region (memtrack counts the whole
 * process, so one region at a time) allocates its own known pattern inside it: thread i
 * allocates i + 1 blocks of 100 * (i + 1) bytes and frees them. The others keep calling
 * meanwhile: memtrack_region_start (refused: MEMTRACK_ERR_STATE), memtrack_region_stop
 * of a region not theirs (MEMTRACK_ERR_STATE) and memtrack_is_tracked, none of which may
 * allocate; an owner keeps its region open until another thread has been refused in it
 * (while others still run), so the calls do overlap. Every stop's counters must be
 * exactly its thread's pattern.
 * Prints how many starts were refused for another thread's region ("refused N"), one
 * line per region, "region ID thread I", then "ok" (exit 0) or what failed.
 */
#include <memtrack.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define ROUNDS 25

static pthread_barrier_t go, done;
static uint64_t region_of[THREADS][ROUNDS];
static char failure[THREADS][256];
/* Calls refused because another thread's region was open, per thread, and in all. */
static uint64_t refused[THREADS];
static atomic_ulong refused_total;
/* Threads still making regions. */
static atomic_int running = THREADS;

static void *worker(void *arg) {
    const int i = (int)(intptr_t)arg;
    const uint64_t blocks = (uint64_t)i + 1, size = 100 * ((uint64_t)i + 1);
    void *held[THREADS];
    pthread_barrier_wait(&go);
    for (int round = 0; round < ROUNDS && !failure[i][0];) {
        int rc = memtrack_region_start();
        if (rc == MEMTRACK_ERR_STATE) {
            refused[i]++;
            atomic_fetch_add(&refused_total, 1);
            /* Another thread's region: its stop is not ours, and asking is harmless. */
            rc = memtrack_region_stop(NULL);
            if (rc != MEMTRACK_ERR_STATE && rc != MEMTRACK_OK) {
                snprintf(failure[i], sizeof failure[i], "foreign stop gave %s: %s",
                         memtrack_status_name(rc), memtrack_last_error());
            }
            if (rc == MEMTRACK_OK) {
                snprintf(failure[i], sizeof failure[i], "stopped another thread's region");
            }
            if (!memtrack_is_tracked()) {
                snprintf(failure[i], sizeof failure[i], "not tracked: %s", memtrack_last_error());
            }
            sched_yield();
            continue;
        }
        if (rc != MEMTRACK_OK) {
            snprintf(failure[i], sizeof failure[i], "start gave %s: %s",
                     memtrack_status_name(rc), memtrack_last_error());
            break;
        }
        for (uint64_t b = 0; b < blocks; b++) held[b] = malloc(size);
        /* Keep the region open until another thread has called into it and been
         * refused (while any other still runs): the calls do overlap. */
        unsigned long seen = atomic_load(&refused_total);
        while (atomic_load(&refused_total) == seen && atomic_load(&running) > 1) sched_yield();
        for (uint64_t b = 0; b < blocks; b++) free(held[b]);
        struct memtrack_counters c;
        rc = memtrack_region_stop(&c);
        if (rc != MEMTRACK_OK) {
            snprintf(failure[i], sizeof failure[i], "stop gave %s: %s",
                     memtrack_status_name(rc), memtrack_last_error());
            break;
        }
        if (c.alloc_calls != blocks || c.free_calls != blocks ||
            c.bytes_allocated != blocks * size || c.bytes_freed != blocks * size ||
            c.live_bytes != 0 || c.lost_events != 0 || c.unmatched_frees != 0) {
            snprintf(failure[i], sizeof failure[i],
                     "region %" PRIu64 " of thread %d: %" PRIu64 " allocs %" PRIu64
                     " B, %" PRIu64 " frees %" PRIu64 " B, %" PRIu64 " unmatched",
                     c.region, i, c.alloc_calls, c.bytes_allocated, c.free_calls,
                     c.bytes_freed, c.unmatched_frees);
            break;
        }
        region_of[i][round++] = c.region;
    }
    atomic_fetch_sub(&running, 1);
    /* No thread exits while another may still measure (a thread's exit releases its
     * malloc cache, which the region would count). */
    pthread_barrier_wait(&done);
    return NULL;
}

int main(void) {
    if (memtrack_current_benchmark("threads/region") != MEMTRACK_OK) {
        printf("current_benchmark: %s\n", memtrack_last_error());
        return 1;
    }
    pthread_t threads[THREADS];
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_barrier_init(&done, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    int failed = 0;
    uint64_t contended = 0;
    for (int i = 0; i < THREADS; i++) contended += refused[i];
    printf("refused %" PRIu64 "\n", contended);
    for (int i = 0; i < THREADS; i++) {
        if (failure[i][0]) {
            printf("thread %d: %s\n", i, failure[i]);
            failed = 1;
        }
        for (int r = 0; r < ROUNDS && !failed; r++)
            printf("region %" PRIu64 " thread %d\n", region_of[i][r], i);
    }
    if (!failed) printf("ok\n");
    return failed;
}
