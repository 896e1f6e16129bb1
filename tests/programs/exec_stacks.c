/* Allocates known blocks from known functions, then execs itself, and the new image
 * allocates other known blocks from other functions: memtrack keeps each image's
 * stacks as its own scope (memtrack-cli/tests/run_stacks_exec.rs checks them exactly).
 *
 *   image 1 (no argument):
 *     first_kept     3 blocks of 1,000 bytes, live when the process execs
 *     first_scratch  2 blocks of 500 bytes, freed before the exec
 *   then execv("/proc/self/exe", [argv0, "second"])
 *   image 2 ("second"):
 *     second_kept    4 blocks of 256 bytes, live at exit
 *     second_scratch 1 block of 4,096 bytes, freed
 *
 * Nothing else allocates: no stdio (its buffers are heap blocks), only write(2). The
 * blocks live at the exec are released by it (the address space is replaced), and the
 * second image never frees them.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *kept[4];

static void fail(const char *what) {
    (void)write(2, what, strlen(what));
    _exit(3);
}

__attribute__((noinline)) static void first_kept(void) {
    for (int i = 0; i < 3; i++)
        if (!(kept[i] = malloc(1000))) fail("exec_stacks: malloc failed\n");
}

__attribute__((noinline)) static void first_scratch(void) {
    void *scratch[2];
    for (int i = 0; i < 2; i++)
        if (!(scratch[i] = malloc(500))) fail("exec_stacks: malloc failed\n");
    for (int i = 0; i < 2; i++) free(scratch[i]);
}

__attribute__((noinline)) static void second_kept(void) {
    for (int i = 0; i < 4; i++)
        if (!(kept[i] = malloc(256))) fail("exec_stacks: malloc failed\n");
}

__attribute__((noinline)) static void second_scratch(void) {
    void *a = malloc(4096);
    if (!a) fail("exec_stacks: malloc failed\n");
    free(a);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "second") == 0) {
        second_kept();
        second_scratch();
        return 0;
    }
    first_kept();
    first_scratch();
    char *next[] = {argv[0], "second", NULL};
    execv("/proc/self/exe", next);
    fail("exec_stacks: execv failed\n");
    return 3;
}
