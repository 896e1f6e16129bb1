/* Blocks with known lifetimes on memtrack's allocation clock (the requested bytes the
 * process allocated while a block was live; valgrind DHAT's "tl" per stack). Every
 * allocation goes through alloc() or resize(), so the frame above them names the
 * stack. In order:
 *
 *   keep_freed: a block of 1000 bytes, then between() allocates and frees 7, 8 and 6
 *     bytes, then the 1000 are freed: lifetime 21. between's blocks: 0 each. The
 *     process's live bytes peak at 1008, when 1015 bytes were allocated.
 *   short_lived: 5 blocks of 10 bytes, each freed at once: 0 each.
 *   grow: 40 bytes, resized to 80 (a new block; the old one's lifetime ends before the
 *     new one is allocated: 0); the 80 stay live to the exit.
 *   keep_live: 50 bytes live to the exit, then tail: 30 bytes live to the exit.
 *
 * The process allocates 1000 + 21 + 50 + 40 + 80 + 50 + 30 = 1271 bytes, so the blocks
 * live at the exit have lifetimes 1271 - 1191 = 80 (grow's 80, allocated when 1191
 * bytes were), 30 (keep_live's) and 0 (tail's). noipa keeps each function whole under
 * its own name; between's loop may be unrolled into three call sites (three stacks). */
#include <stdlib.h>

__attribute__((noipa)) static void *alloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noipa)) static void *resize(void *p, size_t n)
{
    void *q = realloc(p, n);
    __asm__ volatile("" : : "r"(q) : "memory");
    return q;
}

__attribute__((noipa)) static void between(void)
{
    static const size_t sizes[] = { 7, 8, 6 };
    for (int i = 0; i < 3; i++) {
        free(alloc(sizes[i]));
    }
}

__attribute__((noipa)) static void keep_freed(void)
{
    void *p = alloc(1000);
    between();
    free(p);
}

__attribute__((noipa)) static void short_lived(void)
{
    for (int i = 0; i < 5; i++) {
        free(alloc(10));
    }
}

__attribute__((noipa)) static void *grow(void)
{
    void *p = alloc(40);
    p = resize(p, 80);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noipa)) static void *keep_live(void)
{
    void *p = alloc(50);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noipa)) static void *tail(void)
{
    void *p = alloc(30);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(void)
{
    keep_freed();
    short_lived();
    void *grown = grow();
    void *live = keep_live();
    void *last = tail();
    __asm__ volatile("" : : "r"(grown), "r"(live), "r"(last) : "memory");
    return 0;
}
