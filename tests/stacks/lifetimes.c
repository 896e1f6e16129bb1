/* Blocks with known lower bounds on their lifetimes, for the per-stack total
 * lifetime (valgrind DHAT's "tl"): keep_freed's block lives at least 200 ms and is
 * freed; keep_live's block is allocated, then the program sleeps 100 ms and exits with
 * it live (its lifetime runs to the exit); short_lived's 5 blocks are freed at once. */
#include <stdlib.h>
#include <time.h>

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) static void *alloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void keep_freed(void)
{
    void *p = alloc(100);
    sleep_ms(200);
    free(p);
}

__attribute__((noinline)) static void *keep_live(void)
{
    void *p = alloc(50);
    /* Not a tail call: keep_live stays on the stack. */
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void short_lived(void)
{
    for (int i = 0; i < 5; i++) {
        free(alloc(10));
    }
}

int main(void)
{
    keep_freed();
    short_lived();
    void *live = keep_live();
    __asm__ volatile("" : : "r"(live) : "memory");
    sleep_ms(100);
    return 0;
}
