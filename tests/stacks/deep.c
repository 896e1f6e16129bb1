/* A call stack of a chosen depth, for the stacks tests of the kernel unwinder's depth
 * limit (memtrack-cli/tests/run_stacks.rs), built with -O2 -g -fomit-frame-pointer:
 *
 *   main -> descend(N) -> descend(N-1) -> ... -> descend(0) -> malloc(64)
 *
 * N is the first argument (default 40): N + 1 frames of descend, then main and the C
 * library's start-up frames. With several arguments N1 N2 ..., each round allocates from
 * each depth in turn (N1, N2, ..., then N1 again), so consecutive stacks differ in
 * length (memtrack-core/tests/kernel_stacks.rs: the unwinder reuses a stack's id only
 * for the very same frames).
 *
 * noipa keeps descend a real function that recursion cannot be turned into a loop in;
 * the store to `sink` after each call keeps it from being a tail call, so every level
 * leaves a return address. It allocates 3 blocks of 64 bytes from each stack and frees
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

int main(int argc, char **argv) {
    for (int i = 0; i < 3; i++) {
        for (int a = 1; a < (argc > 1 ? argc : 2); a++) {
            int n = argc > 1 ? atoi(argv[a]) : 40;
            char *p = descend(n); /* site: main calls descend */
            sink = (char)i;
            free(p);
        }
    }
    return 0;
}
