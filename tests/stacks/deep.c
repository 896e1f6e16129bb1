/* A call stack deeper than the kernel unwinder's depth limit (16 frames), for the
 * stacks tests (memtrack-cli/tests/run_stacks.rs), built with -O2 -g
 * -fomit-frame-pointer:
 *
 *   main -> descend(40) -> descend(39) -> ... -> descend(1) -> malloc(64)
 *
 * noipa keeps descend a real function that recursion cannot be turned into a loop in;
 * the store to `sink` after each call keeps it from being a tail call, so every level
 * leaves a return address. It allocates 3 blocks of 64 bytes from that stack and frees
 * them all. */
#include <stdlib.h>

volatile char sink;

__attribute__((noipa)) char *descend(int n) {
    char *p;
    if (n == 0)
        p = malloc(64); /* site: descend calls malloc */
    else
        p = descend(n - 1); /* site: descend calls descend */
    sink = (char)n;
    return p;
}

int main(void) {
    for (int i = 0; i < 3; i++) {
        char *p = descend(40);
        sink = (char)i;
        free(p);
    }
    return 0;
}
