/* A shared library loaded with dlopen by plugin_host.c, for the stacks-versus-DHAT
 * tests (memtrack-cli/tests/stacks_vs_dhat.rs); built with gcc -O2 -g
 * -fomit-frame-pointer -shared -fPIC:
 *
 *   main (plugin_host) -> load -> decode -> malloc(n + 4)      10 blocks of 36 bytes, 1 kept
 *   main (plugin_host) -> load_other -> decode -> malloc(5 n)   3 blocks of 40 bytes, freed
 *
 * noipa keeps the functions real and the stores to `sink` keep the calls from becoming
 * tail calls. load's call to decode goes through the PLT (decode is exported), a jump that
 * leaves no frame of its own. */
#include <stdlib.h>

volatile char sink;

__attribute__((noipa)) char *decode(size_t n) {
    char *p = malloc(n); /* site: decode calls malloc */
    p[0] = 1;
    sink = p[0];
    return p;
}

__attribute__((noipa)) char *load(size_t n) {
    char *p = decode(n + 4); /* site: load calls decode */
    sink = p[0];
    return p;
}

__attribute__((noipa)) char *load_other(size_t n) {
    char *p = decode(n * 5); /* site: load_other calls decode */
    sink = p[0];
    return p;
}
