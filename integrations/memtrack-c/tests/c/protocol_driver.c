/*
 * The protocol conformance steps through libmemtrack (tests/protocol_conformance.rs runs
 * the same steps through the Rust and the Python clients, against one scripted runner).
 * One line per step on stdout: "STEP CLASS | MESSAGE" or "STEP ok COUNTERS".
 * usage: protocol_driver [old]   ("old": the runner speaks version 1 only)
 */
#include <memtrack.h>

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *class_of(int rc) {
    switch (rc) {
    case MEMTRACK_OK: return "ok";
    case MEMTRACK_INACTIVE: return "inactive";
    case MEMTRACK_ERR_INVALID: return "invalid";
    case MEMTRACK_ERR_STATE: return "state";
    case MEMTRACK_ERR_REJECTED: return "rejected";
    case MEMTRACK_ERR_VERSION: return "version";
    default: return memtrack_status_name(rc);
    }
}

static void say(const char *step, int rc) {
    if (rc == MEMTRACK_OK)
        printf("%s ok\n", step);
    else
        printf("%s %s | %s\n", step, class_of(rc), memtrack_last_error());
    fflush(stdout);
}

static void say_counters(const char *step, int rc, const struct memtrack_counters *c) {
    if (rc != MEMTRACK_OK) {
        say(step, rc);
        return;
    }
    printf("%s ok region=%" PRIu64 " alloc_calls=%" PRIu64 " free_calls=%" PRIu64
           " bytes_allocated=%" PRIu64 " bytes_freed=%" PRIu64 " live_blocks=%" PRIu64
           " live_bytes=%" PRIu64 " peak_live_bytes=%" PRIu64 " failed_allocs=%" PRIu64
           " unmatched_frees=%" PRIu64 " lost_events=%" PRIu64 "\n",
           step, c->region, c->alloc_calls, c->free_calls, c->bytes_allocated, c->bytes_freed,
           c->live_blocks, c->live_bytes, c->peak_live_bytes, c->failed_allocs,
           c->unmatched_frees, c->lost_events);
    fflush(stdout);
}

static void region(const char *step) {
    struct memtrack_counters c;
    int rc = memtrack_region_start();
    if (rc != MEMTRACK_OK) {
        say(step, rc);
        return;
    }
    rc = memtrack_region_stop(&c);
    say_counters(step, rc, &c);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "old") == 0) {
        say("version", memtrack_current_benchmark("conformance/a"));
        return 0;
    }
    say("version", memtrack_is_tracked() ? MEMTRACK_OK : MEMTRACK_ERR_RUNNER);
    say("name", memtrack_current_benchmark("conformance/a"));
    region("region");
    say("stop-without-start", memtrack_region_stop(NULL));
    int rc = memtrack_region_start();
    if (rc != MEMTRACK_OK) say("start-twice-first", rc);
    say("start-twice", memtrack_region_start());
    struct memtrack_counters c;
    rc = memtrack_region_stop(&c);
    say_counters("start-twice-stop", rc, &c);
    say("uri-newline", memtrack_current_benchmark("bad\nuri"));
    char *long_uri = malloc(4098);
    memset(long_uri, 'u', 4097);
    long_uri[4097] = 0;
    say("uri-too-long", memtrack_current_benchmark(long_uri));
    free(long_uri);
    char *huge = malloc((1 << 20) + 1);
    memset(huge, 'm', 1 << 20);
    huge[1 << 20] = 0;
    say("uri-1mib", memtrack_current_benchmark(huge));
    free(huge);

    /* Garbage straight into the control FIFO, then a command: answered. */
    char path[4096];
    snprintf(path, sizeof path, "%s/control.fifo", getenv("MEMTRACK_FIFO_DIR"));
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    const char garbage[] = "\xff\xff\xff\xffgarbage";
    if (fd < 0 || write(fd, garbage, sizeof garbage - 1) != (ssize_t)(sizeof garbage - 1)) {
        printf("garbage could-not-write\n");
        return 1;
    }
    close(fd);
    say("garbage", memtrack_current_benchmark("conformance/after-garbage"));
    region("region-after-garbage");
    say("name-region", memtrack_name_region(2, "conformance/renamed"));
    say("name-missing-region", memtrack_name_region(99, "x"));

    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int rc2 = memtrack_current_benchmark("conformance/child");
        if (rc2 != MEMTRACK_OK) {
            say("fork-child", rc2);
            _exit(1);
        }
        region("fork-child");
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("fork %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "ok" : "child-failed");
    fflush(stdout);
    say("name-parent", memtrack_current_benchmark("conformance/a"));
    region("region-after-fork");
    return 0;
}
