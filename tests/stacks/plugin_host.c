/* Loads plugin.c's library (path in argv[1]) with dlopen after it started, and calls its
 * functions through dlsym, for the stacks-versus-DHAT tests
 * (memtrack-cli/tests/stacks_vs_dhat.rs); built with gcc -O2 -g -fomit-frame-pointer.
 * The library's tables must be loaded while the program runs: it is not mapped at exec.
 * dlopen itself allocates too (the loader's own records of the library). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

volatile char sink;

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: plugin_host LIBRARY\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW); /* site: main calls dlopen */
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    char *(*load)(size_t) = (char *(*)(size_t))dlsym(lib, "load");
    char *(*load_other)(size_t) = (char *(*)(size_t))dlsym(lib, "load_other");
    if (!load || !load_other) {
        fprintf(stderr, "dlsym in %s failed\n", argv[1]);
        return 1;
    }
    char *kept = 0;
    for (int i = 0; i < 10; i++) {
        char *p = load(32); /* site: main calls load */
        if (i == 9)
            kept = p;
        else
            free(p);
    }
    for (int i = 0; i < 3; i++)
        free(load_other(8)); /* site: main calls load_other */
    sink = kept[0];
    return 0;
}
