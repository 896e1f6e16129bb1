/*
 * memtrack.h: benchmark regions of `memtrack run`, from C, C++ or anything that can
 * call C. Part of memtrack (MIT OR Apache-2.0).
 *
 * Under `memtrack run -- PROGRAM`, memtrack counts every allocation call (malloc,
 * calloc, realloc, free, operator new/delete, ... of any allocator) of the program's
 * processes in the kernel, exactly. With this library a program marks *regions*: it
 * names the benchmark, starts a region, runs the code to measure, and stops it. From
 * the first region on, memtrack counts only inside regions, reports each one under its
 * benchmark's name (`memtrack report DIR`), and the stop hands the region's counters
 * back to the program:
 *
 *     #include <memtrack.h>
 *
 *     struct memtrack_counters c;
 *     memtrack_current_benchmark("parse/small");
 *     if (memtrack_region_start() == MEMTRACK_OK) {
 *         parse(input);
 *         if (memtrack_region_stop(&c) == MEMTRACK_OK)
 *             printf("%llu allocations, peak %llu B\n",
 *                    (unsigned long long)c.alloc_calls,
 *                    (unsigned long long)c.peak_live_bytes);
 *     }
 *
 * Build:  cc prog.c $(pkg-config --cflags --libs memtrack)
 * (installed by `scripts/install-c-api.sh PREFIX` from memtrack's repository).
 *
 * What a region counts: every allocation call of the *whole process* (all threads)
 * that begins between the runner's handling of memtrack_region_start and of
 * memtrack_region_stop. memtrack counts blocks as valgrind DHAT does: each successful
 * allocating call hands out one block of the requested size; a realloc that moves or
 * resizes a block releases the old block and hands out a new one.
 *
 * Outside `memtrack run` (MEMTRACK_FIFO_DIR unset or empty) every call returns
 * MEMTRACK_INACTIVE at once, does nothing and allocates nothing; after the first call
 * each costs one atomic load. A program can thus leave its calls in place.
 *
 * Return values: every call but memtrack_is_tracked, memtrack_last_error,
 * memtrack_status_name and memtrack_protocol_version returns a status: MEMTRACK_OK (0),
 * MEMTRACK_INACTIVE (1, not an error: not under `memtrack run`), or one of the negative
 * MEMTRACK_ERR_* codes; memtrack_last_error() then says why, in words.
 *
 * Threads: every call may be made from any thread at any time; calls take turns on one
 * lock (waiting at most 5 s, then MEMTRACK_ERR_BUSY) and each is answered. memtrack
 * counts the whole process, so one region is open at a time: a second start is refused
 * (MEMTRACK_ERR_STATE), and only the thread that started the region may stop it.
 *
 * Allocation: memtrack_region_start and memtrack_region_stop allocate and free nothing,
 * whether they succeed or are refused, so nothing of the library's is counted in a
 * region, whichever thread calls. The first call of a process (it connects to the
 * runner) and the calls taking text (memtrack_set_integration,
 * memtrack_current_benchmark, memtrack_name_region) allocate: make them outside
 * regions. (If the library was loaded with dlopen, the first call on each thread may
 * also make glibc allocate that thread's copy of the library's thread-local storage.)
 *
 * fork: a child inherits the connection and may make regions of its own once its
 * parent's region is closed; a region its parent opened is not the child's to stop
 * (MEMTRACK_ERR_STATE), and starting one while the parent's is open is refused by the
 * runner (MEMTRACK_ERR_REJECTED). Nothing hangs: a fork made while another thread held
 * the library's lock gives MEMTRACK_ERR_BUSY in the child after 5 s.
 */
#ifndef MEMTRACK_H
#define MEMTRACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header's ABI: changes only when a call or the struct changes
 * incompatibly (and with it the library's soname, libmemtrack.so.0). */
#define MEMTRACK_ABI_VERSION 0

/* Status codes. */
#define MEMTRACK_OK 0
/* Not under `memtrack run`: nothing done (not an error). */
#define MEMTRACK_INACTIVE 1
/* A bad argument: NULL, text that is not UTF-8, a uri too long to send (over 1 MiB). */
#define MEMTRACK_ERR_INVALID (-1)
/* Not possible now: a region is already open, or none was opened by this thread of
 * this process. Nothing was sent to the runner. */
#define MEMTRACK_ERR_STATE (-2)
/* The runner refused the command; e.g. a uri that is empty, longer than 4096 bytes or
 * holds a control character such as a newline. */
#define MEMTRACK_ERR_REJECTED (-3)
/* The runner could not be reached, went away, or did not answer within 5 s. */
#define MEMTRACK_ERR_RUNNER (-4)
/* The runner speaks no protocol version this library speaks (a memtrack of another
 * release): the message names the versions it does. */
#define MEMTRACK_ERR_VERSION (-5)
/* Another thread held the library's lock for 5 s (or the process was forked while it
 * did). */
#define MEMTRACK_ERR_BUSY (-6)

/* What memtrack counted in one region. Sizes are requested sizes in bytes; the rest are
 * counts. Only calls that began inside the region count. */
struct memtrack_counters {
    /* The region's id within this run, for memtrack_name_region. */
    uint64_t region;
    /* Blocks handed out (successful allocating calls). */
    uint64_t alloc_calls;
    /* Blocks released; only blocks allocated inside the region. */
    uint64_t free_calls;
    /* Bytes of the blocks handed out. */
    uint64_t bytes_allocated;
    /* Bytes of the blocks released. */
    uint64_t bytes_freed;
    /* Blocks allocated inside the region and still live at its end. */
    uint64_t live_blocks;
    /* Bytes of those blocks: the region's net heap growth,
     * bytes_allocated - bytes_freed. */
    uint64_t live_bytes;
    /* Highest number of bytes live at any instant of the region (of blocks allocated
     * inside it). */
    uint64_t peak_live_bytes;
    /* Allocation calls that failed (returned NULL). */
    uint64_t failed_allocs;
    /* Releases of blocks not allocated inside the region (allocated before it, or
     * released twice); never subtracted from the numbers above. */
    uint64_t unmatched_frees;
    /* Events memtrack could not account exactly; 0 means every number is exact. */
    uint64_t lost_events;
};

/* 1 if this process runs under `memtrack run` and its runner answers, else 0
 * (memtrack_last_error says why when it was not simply absent). */
int memtrack_is_tracked(void);

/* Names the integration calling the library and its version (UTF-8), recorded in
 * memtrack's MarkerResult.msgpack. Optional. */
int memtrack_set_integration(const char *name, const char *version);

/* Names the benchmark the next regions of this process measure: `uri`, UTF-8, 1 to 4096
 * bytes, no control characters (e.g. "bench/parse.c::small"). memtrack's reports list
 * each region under it. Allocates: call it outside regions. */
int memtrack_current_benchmark(const char *uri);

/* Starts a region, for the benchmark last named. memtrack counts from the runner's
 * handling of this call on; the call's own return is allocation-free. */
int memtrack_region_start(void);

/* Stops the region this thread started and, if `out` is not NULL, writes its counters
 * there (the same numbers memtrack writes into its result files). The call allocates
 * nothing until memtrack has stopped counting. */
int memtrack_region_stop(struct memtrack_counters *out);

/* Renames this process's closed region `region` (from its counters) to `uri`, for
 * harnesses that learn a benchmark's name only after it ran. Allocates. */
int memtrack_name_region(uint64_t region, const char *uri);

/* The calling thread's message about its last call that did not return MEMTRACK_OK,
 * "" after one that did; NUL-terminated UTF-8, valid until this thread's next call. */
const char *memtrack_last_error(void);

/* The name of a status code ("MEMTRACK_ERR_REJECTED", ...); a static string. */
const char *memtrack_status_name(int status);

/* The version of memtrack's runner protocol this library speaks (2). */
uint64_t memtrack_protocol_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACK_H */
