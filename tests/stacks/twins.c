/* Stacks that look alike where the kernel's cache of walks looks first, for its tests
 * (memtrack-core/tests/kernel_stacks.rs), built with -O2 -g -fomit-frame-pointer:
 *
 *   main -> left  -> leaf -> malloc(64)      main -> fp_left  -> fp_leaf -> malloc(160)
 *   main -> right -> leaf -> malloc(96)      main -> fp_right -> fp_leaf -> malloc(192)
 *   main -> same  -> leaf -> malloc(128)     main -> fp_same  -> fp_leaf -> malloc(224)
 *   main -> big   -> leaf -> malloc(256)
 *
 *   twins ROUNDS    (default 1000)
 *
 * left, right and same have the same frame (the same code but for a constant), and main
 * calls each from the same stack depth, so malloc is entered with the same stack pointer
 * and the same return address into leaf from all three: the cache slot's tag matches,
 * and only the next return address (into left, right or same) tells the stacks apart.
 * main calls left and right in turn ROUNDS times (each finds the other's walk in the
 * slot: the words differ, it walks), then same ROUNDS times (the same stack every time:
 * the cache gives it). The fp_ functions do the same with frame pointers, so the walk
 * takes rbp as the frame base: from the register at malloc's entry (fp_leaf's frame),
 * then from the rbp fp_leaf saved. big's frame holds 20,000 bytes, so the return address
 * into main lies further above malloc's stack pointer than the cache looks (16 KiB):
 * ROUNDS calls, each walked. Every block is freed at once.
 *
 * noipa keeps each function a real one that is neither inlined nor merged with its
 * twin; the store to `sink` after each call keeps the calls from being tail calls. */
#include <stdlib.h>

volatile long sink;

#define LEAF(name, attrs)                                                                \
    __attribute__((noipa attrs)) void name(long n) {                                   \
        void *p = malloc(n);                                                           \
        sink = (long)p;                                                                \
        free(p);                                                                       \
    }

#define CALLER(name, leaf, size, attrs)                                                \
    __attribute__((noipa attrs)) void name(long n) {                                   \
        leaf(n + size);                                                                \
        sink = n;                                                                      \
    }

#define FRAME_POINTER , optimize("no-omit-frame-pointer")

LEAF(leaf, )
CALLER(left, leaf, 64, )
CALLER(right, leaf, 96, )
CALLER(same, leaf, 128, )

LEAF(fp_leaf, FRAME_POINTER)
CALLER(fp_left, fp_leaf, 160, FRAME_POINTER)
CALLER(fp_right, fp_leaf, 192, FRAME_POINTER)
CALLER(fp_same, fp_leaf, 224, FRAME_POINTER)

__attribute__((noipa)) void big(long n) {
    volatile char pad[20000];
    pad[0] = (char)n;
    leaf(n + 256);
    sink = pad[0];
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < rounds; i++) {
        left(0);
        right(0);
    }
    for (long i = 0; i < rounds; i++)
        same(0);
    for (long i = 0; i < rounds; i++) {
        fp_left(0);
        fp_right(0);
    }
    for (long i = 0; i < rounds; i++)
        fp_same(0);
    for (long i = 0; i < rounds; i++)
        big(0);
    return 0;
}
