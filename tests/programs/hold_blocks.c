/*
 * Holds many blocks live at once and churns them, for the tests of the live-block maps
 * (memtrack-core/tests/live_on_demand.rs): `hold_blocks BLOCKS [PROCESSES]` forks
 * PROCESSES children (default 1), which share BLOCKS and run at once, each tracked with
 * counters of its own while all use the same kernel maps. Each child, in phases:
 *   1. mallocs its share of the blocks (sizes 16 + i % 100);
 *   2. frees every third, then shrinks every seventh of the rest with realloc (to
 *      size / 2 + 1: usually in place, the same address handed out again);
 *   3. grows every fifth of the rest with realloc (+ 4096: a new address), then makes
 *      one realloc that fails (a size above PTRDIFF_MAX: the block stays);
 *   4. mallocs 500 more (at addresses freed in phase 2, some);
 *   5. frees everything.
 * Its bookkeeping lives in mmap'd memory and it prints with write(2): the allocator
 * calls are the phases' alone. Live bytes only fall in phase 2 and only rise in phases
 * 1, 3 and 4 (a realloc releases its old block before it hands out the new one), so
 * its peak is at the end of phase 1 or of phase 4. Each child prints what memtrack must
 * count for it, as valgrind DHAT counts (a successful realloc releases the old block
 * and hands out a new one), on one line:
 *   pid=N allocs=N frees=N bytes_allocated=N bytes_freed=N failed=N peak=N
 * The parent waits for every child and exits 0 if all did.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXTRA 500

static void *map_zeroed(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        _exit(3);
    return p;
}

static void child(long blocks)
{
    long n = blocks + EXTRA;
    void **ptr = map_zeroed(n * sizeof *ptr);
    size_t *size = map_zeroed(n * sizeof *size);
    unsigned long allocs = 0, frees = 0, bytes_allocated = 0, bytes_freed = 0, failed = 0;
    long live = 0, peak = 0;

    for (long i = 0; i < blocks; i++) {
        size_t s = 16 + i % 100;
        if (!(ptr[i] = malloc(s)))
            _exit(4);
        size[i] = s;
        allocs++;
        bytes_allocated += s;
        live += s;
    }
    peak = live;
    for (long i = 0; i < blocks; i += 3) {
        free(ptr[i]);
        frees++;
        bytes_freed += size[i];
        live -= size[i];
        ptr[i] = NULL;
    }
    for (long i = 0; i < blocks; i++) {
        if (!ptr[i] || i % 7 != 2)
            continue;
        size_t s = size[i] / 2 + 1;
        void *q = realloc(ptr[i], s);
        if (!q)
            _exit(5);
        frees++;
        bytes_freed += size[i];
        allocs++;
        bytes_allocated += s;
        live += (long)s - (long)size[i];
        ptr[i] = q;
        size[i] = s;
    }
    long last = -1;
    for (long i = 0; i < blocks; i++) {
        if (!ptr[i])
            continue;
        last = i;
        if (i % 5 != 1)
            continue;
        size_t s = size[i] + 4096;
        void *q = realloc(ptr[i], s);
        if (!q)
            _exit(6);
        frees++;
        bytes_freed += size[i];
        allocs++;
        bytes_allocated += s;
        live += 4096;
        ptr[i] = q;
        size[i] = s;
    }
    if (last >= 0) {
        /* Volatile: gcc must not know the size is absurd. */
        volatile size_t huge = (size_t)PTRDIFF_MAX + 1;
        if (realloc(ptr[last], huge) != NULL)
            _exit(7);
        failed++;
    }
    for (long i = blocks; i < n; i++) {
        size_t s = 24 + i % 50;
        if (!(ptr[i] = malloc(s)))
            _exit(8);
        size[i] = s;
        allocs++;
        bytes_allocated += s;
        live += s;
    }
    if (live > peak)
        peak = live;
    for (long i = 0; i < n; i++) {
        if (!ptr[i])
            continue;
        free(ptr[i]);
        frees++;
        bytes_freed += size[i];
        live -= size[i];
    }
    if (live != 0)
        _exit(9);
    char line[256];
    int len = snprintf(line, sizeof line,
                       "pid=%d allocs=%lu frees=%lu bytes_allocated=%lu bytes_freed=%lu "
                       "failed=%lu peak=%ld\n",
                       (int)getpid(), allocs, frees, bytes_allocated, bytes_freed, failed, peak);
    if (len <= 0 || write(1, line, len) != len)
        _exit(10);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        static const char usage[] = "usage: hold_blocks BLOCKS [PROCESSES]\n";
        (void)!write(2, usage, sizeof usage - 1);
        return 2;
    }
    long blocks = atol(argv[1]);
    long processes = argc > 2 ? atol(argv[2]) : 1;
    if (blocks < 1 || processes < 1 || processes > 64)
        return 2;
    for (long i = 0; i < processes; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0)
            child(blocks / processes + (i < blocks % processes));
    }
    int ok = 1;
    for (long i = 0; i < processes; i++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            ok = 0;
    }
    return ok ? 0 : 1;
}
