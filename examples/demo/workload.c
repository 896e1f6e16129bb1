/*
 * The demo workload `scripts/demo.sh` tracks: a small program with known heap behaviour,
 * so the report can be checked by eye.
 *
 *   parent: 100 x malloc(1000), frees 50 of them, grows one block with realloc
 *           (1000 -> 4000 bytes), forks, waits, then frees everything but 10 blocks.
 *   child:  10 x calloc(64, 1024) (64 KiB each), frees 5, exits.
 *
 * Expected (parent): 101 blocks / 104,000 bytes allocated (100 x 1000 + the 4000-byte
 * realloc block), 91 blocks / 94,000 bytes freed (90 frees + realloc's release of the
 * old 1000-byte block), 10 live blocks (10,000 bytes) at exit, peak 100,000 bytes.
 * Expected (child): 10 blocks / 655,360 bytes, 5 freed, 5 live (327,680 bytes).
 * It prints with write(2), not stdio, because stdio would allocate a buffer too.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *s) { (void)!write(1, s, strlen(s)); }

int main(void)
{
    void *blocks[100];
    for (int i = 0; i < 100; i++)
        blocks[i] = malloc(1000);
    for (int i = 0; i < 50; i++) {
        free(blocks[i]);
        blocks[i] = NULL;
    }
    blocks[50] = realloc(blocks[50], 4000);

    pid_t child = fork();
    if (child == 0) {
        void *big[10];
        for (int i = 0; i < 10; i++)
            big[i] = calloc(64, 1024);
        for (int i = 0; i < 5; i++)
            free(big[i]);
        say("child: 10 x 64 KiB allocated, 5 freed\n");
        _exit(0);
    }
    waitpid(child, NULL, 0);
    for (int i = 50; i < 90; i++)
        free(blocks[i]);
    say("parent: 100 x 1000 B allocated, one grown to 4000 B, 90 freed, 10 left live\n");
    return 0;
}
