/*
 * libmemtrack in a forked child, under `memtrack run`. The parent forks inside its
 * region "fork/parent": the child may neither stop that region (MEMTRACK_ERR_STATE: not
 * its own) nor start one while it is open (MEMTRACK_ERR_REJECTED, from the runner). Once
 * the parent has closed it, the child makes its own region "fork/child"; then the parent
 * makes "fork/parent-after". Each region holds exactly its own allocations:
 *   fork/parent        3 blocks of 500 B, freed
 *   fork/child         7 blocks of 70 B, freed
 *   fork/parent-after  2 blocks of 222 B, freed
 * Prints "child ok" / "parent ok" (exit 0), or what failed.
 */
#include <memtrack.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int region(const char *uri, int blocks, size_t size, const char *who) {
    struct memtrack_counters c;
    void *held[16];
    int rc = memtrack_current_benchmark(uri);
    if (rc == MEMTRACK_OK) rc = memtrack_region_start();
    if (rc != MEMTRACK_OK) {
        printf("%s: %s: %s\n", who, memtrack_status_name(rc), memtrack_last_error());
        return 1;
    }
    for (int b = 0; b < blocks; b++) held[b] = malloc(size);
    for (int b = 0; b < blocks; b++) free(held[b]);
    rc = memtrack_region_stop(&c);
    if (rc != MEMTRACK_OK || c.alloc_calls != (uint64_t)blocks ||
        c.bytes_allocated != (uint64_t)blocks * size || c.free_calls != (uint64_t)blocks) {
        printf("%s: %s (%s): %" PRIu64 " allocs, %" PRIu64 " B\n", who,
               memtrack_status_name(rc), memtrack_last_error(), c.alloc_calls,
               c.bytes_allocated);
        return 1;
    }
    return 0;
}

int main(void) {
    int to_child[2], to_parent[2];
    char byte = 0;
    if (pipe(to_child) || pipe(to_parent)) return 2;
    struct memtrack_counters c;
    fflush(stdout);
    if (memtrack_current_benchmark("fork/parent") != MEMTRACK_OK ||
        memtrack_region_start() != MEMTRACK_OK) {
        printf("parent: %s\n", memtrack_last_error());
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        int failed = 0;
        int rc = memtrack_region_stop(&c);
        if (rc != MEMTRACK_ERR_STATE) {
            printf("child: stop of the parent's region gave %s\n", memtrack_status_name(rc));
            failed = 1;
        }
        char state_message[512];
        snprintf(state_message, sizeof state_message, "%s", memtrack_last_error());
        rc = memtrack_region_start();
        if (rc != MEMTRACK_ERR_REJECTED) {
            printf("child: start inside the parent's region gave %s\n", memtrack_status_name(rc));
            failed = 1;
        }
        printf("child stop: %s\nchild start: %s\n", state_message, memtrack_last_error());
        fflush(stdout);
        if (write(to_parent[1], &byte, 1) != 1 || read(to_child[0], &byte, 1) != 1) _exit(2);
        failed |= region("fork/child", 7, 70, "child");
        printf(failed ? "child failed\n" : "child ok\n");
        fflush(stdout);
        _exit(failed);
    }
    /* The parent's region goes on while the child tries. */
    if (read(to_parent[0], &byte, 1) != 1) return 2;
    void *held[3];
    for (int b = 0; b < 3; b++) held[b] = malloc(500);
    for (int b = 0; b < 3; b++) free(held[b]);
    int rc = memtrack_region_stop(&c);
    if (rc != MEMTRACK_OK || c.alloc_calls != 3 || c.bytes_allocated != 1500 || c.free_calls != 3) {
        printf("parent: %s: %" PRIu64 " allocs, %" PRIu64 " B\n", memtrack_last_error(),
               c.alloc_calls, c.bytes_allocated);
        return 1;
    }
    if (write(to_child[1], &byte, 1) != 1) return 2;
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("parent: the child failed\n");
        return 1;
    }
    if (region("fork/parent-after", 2, 222, "parent")) return 1;
    printf("parent ok\n");
    return 0;
}
