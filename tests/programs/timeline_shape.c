/*
 * A heap with a known shape over time, for the timeline tests (memtrack-core/tests/
 * timeline.rs). Pinned to the machine's last CPU first (so the resident-memory
 * tracepoint is seen firing away from CPU 0), then:
 *
 *   ramp   100 blocks of 10,000 bytes, one a millisecond: up to 1,000,000 live bytes
 *   spike  a 5,000,000-byte block freed at once (well under a microsecond live):
 *          the process's peak, 6,000,000 bytes
 *   drop   the ramp's blocks freed: 0 live bytes
 *   pages  a 64 MiB anonymous mapping, every page touched (resident), then unmapped
 *   leak   50 blocks of 1,000 bytes, one every 2 ms, never freed: 50,000 live at exit
 *
 * with 20 ms pauses between the phases. It writes the CLOCK_MONOTONIC times (ns) of
 * each phase's start and end to the file named by its first argument, one
 * `name start end` line each, with write(2) only (no stdio: its buffers would be heap
 * blocks of their own).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0)
        ;
}

static int out = -1;

/* Appends `name start end` to the times file (snprintf into a stack buffer: no heap). */
static void mark(const char *name, uint64_t start, uint64_t end)
{
    char line[96];
    int n = snprintf(line, sizeof line, "%s %llu %llu\n", name, (unsigned long long)start,
                     (unsigned long long)end);
    if (n <= 0 || write(out, line, (size_t)n) != n)
        _exit(3);
}

enum { RAMP = 100, RAMP_BYTES = 10000, SPIKE = 5000000, PAGES_BYTES = 64 << 20,
       LEAK = 50, LEAK_BYTES = 1000 };

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return 3;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)(cpus > 0 ? cpus - 1 : 0), &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        return 4;
    sleep_ms(20);

    static void *ramp[RAMP];
    uint64_t t0 = now_ns();
    for (int i = 0; i < RAMP; i++) {
        ramp[i] = malloc(RAMP_BYTES);
        if (!ramp[i])
            return 5;
        memset(ramp[i], 1, RAMP_BYTES);
        sleep_ms(1);
    }
    mark("ramp", t0, now_ns());
    sleep_ms(20);

    t0 = now_ns();
    void *spike = malloc(SPIKE);
    free(spike);
    mark("spike", t0, now_ns());
    sleep_ms(20);

    t0 = now_ns();
    for (int i = 0; i < RAMP; i++)
        free(ramp[i]);
    mark("drop", t0, now_ns());
    sleep_ms(20);

    t0 = now_ns();
    char *pages = mmap(NULL, PAGES_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    if (pages == MAP_FAILED)
        return 6;
    for (long off = 0; off < PAGES_BYTES; off += 4096)
        pages[off] = 1;
    uint64_t touched = now_ns();
    sleep_ms(20);
    uint64_t unmapping = now_ns();
    munmap(pages, PAGES_BYTES);
    mark("pages", t0, touched);
    mark("unmap", unmapping, now_ns());
    sleep_ms(20);

    t0 = now_ns();
    for (int i = 0; i < LEAK; i++) {
        if (!malloc(LEAK_BYTES))
            return 7;
        sleep_ms(2);
    }
    mark("leak", t0, now_ns());
    return 0;
}
