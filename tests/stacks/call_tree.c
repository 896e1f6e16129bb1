/* A known call tree for the stacks tests (memtrack-cli/tests/stacks.rs), built with
 * -O2 -g -fomit-frame-pointer: no frame pointers, as Debian's own code.
 *
 *   main -> load -> parse_header (always inlined into load) -> decode -> malloc(n + 16)
 *   main -> load_other -> decode -> malloc(2 n)
 *
 * noipa keeps decode, load and load_other real functions under their own names (no
 * inlining, no clones); the stores to `sink` after each call keep the calls from
 * becoming tail calls, so every call leaves a return address. Each call site is marked
 * with a "site:" comment, which the tests find to know the expected line.
 *
 * It allocates as valgrind DHAT reports it: 10 blocks of 116 bytes from the first
 * stack (one kept to the end), 3 blocks of 100 bytes from the second (all freed). */
#include <stdlib.h>
#include <string.h>

volatile char sink;

__attribute__((noipa)) char *decode(size_t n) {
    char *p = malloc(n); /* site: decode calls malloc */
    memset(p, 1, n);
    sink = p[0];
    return p;
}

static inline __attribute__((always_inline)) char *parse_header(size_t n) {
    char *p = decode(n + 16); /* site: parse_header calls decode */
    sink = p[1];
    return p;
}

__attribute__((noipa)) char *load(size_t n) {
    char *p = parse_header(n); /* site: load calls parse_header */
    sink = p[2];
    return p;
}

__attribute__((noipa)) char *load_other(size_t n) {
    char *p = decode(n * 2); /* site: load_other calls decode */
    sink = p[3];
    return p;
}

int main(void) {
    char *kept = 0;
    for (int i = 0; i < 10; i++) {
        char *p = load(100); /* site: main calls load */
        if (i == 9)
            kept = p;
        else
            free(p);
    }
    for (int i = 0; i < 3; i++)
        free(load_other(50)); /* site: main calls load_other */
    sink = kept[0];
    return 0;
}
