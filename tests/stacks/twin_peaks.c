/* A global peak reached twice from different stacks, for the stacks-versus-DHAT tests
 * (memtrack-cli/tests/stacks_vs_dhat.rs); built with gcc -O2 -g -fomit-frame-pointer:
 *
 *   main -> keep -> malloc(50)          1 block, live from start to end
 *   main -> phase_a -> malloc(100)      3 blocks, then all freed      peak 350 (first)
 *   main -> phase_b -> malloc(150)      2 blocks, then all freed      peak 350 again
 *
 * With an argument ("higher") phase_b allocates 2 blocks of 160 bytes instead: the second
 * peak (370) is higher than the first. With equal peaks, valgrind DHAT's t-gmax is the
 * latest time the largest total is reached (phase B's), memtrack's the first (phase A's). */
#include <stdlib.h>

volatile char sink;

__attribute__((noipa)) char *keep(size_t n) {
    char *p = malloc(n); /* site: keep calls malloc */
    sink = p[0] = 1;
    return p;
}

__attribute__((noipa)) char *phase_a(size_t n) {
    char *p = malloc(n); /* site: phase_a calls malloc */
    sink = p[0] = 2;
    return p;
}

__attribute__((noipa)) char *phase_b(size_t n) {
    char *p = malloc(n); /* site: phase_b calls malloc */
    sink = p[0] = 3;
    return p;
}

int main(int argc, char **argv) {
    (void)argv;
    size_t b_size = argc > 1 ? 160 : 150;
    char *kept = keep(50); /* site: main calls keep */
    char *a[3], *b[2];
    for (int i = 0; i < 3; i++)
        a[i] = phase_a(100); /* site: main calls phase_a */
    for (int i = 0; i < 3; i++)
        free(a[i]);
    for (int i = 0; i < 2; i++)
        b[i] = phase_b(b_size); /* site: main calls phase_b */
    for (int i = 0; i < 2; i++)
        free(b[i]);
    sink = kept[0];
    return 0;
}
