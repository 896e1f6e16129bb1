/* Marks three benchmark regions over memtrack's FIFO protocol, speaking its wire format
 * itself (a u32 little-endian length, then a MessagePack body), as a program in any
 * language can, with exactly known allocations inside each:
 *
 *   scaled::fixed  100 blocks of 100 bytes, all live at once, then freed
 *   scaled::grown  N blocks of 100 bytes, all live at once, then freed, where
 *                  N = 100 * $SCALED_PERCENT / 100 (SCALED_PERCENT defaults to 100;
 *                  110 makes this benchmark allocate 10% more: calls, bytes and peak)
 *   scaled::kept   10 blocks of 64 bytes, left live
 *
 * Run under `memtrack run` (which sets MEMTRACK_FIFO_DIR); without it the regions run
 * unmeasured. memtrack-cli's tests compare two runs of it with `memtrack diff`. The
 * scale comes from the environment, not an argument, so that both runs have the same
 * command line, which is how `memtrack diff` matches processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int control = -1, ack = -1;

/* Everything is built in these buffers, so that no call between StartBenchmark and
 * StopBenchmark allocates. */
static unsigned char frame[256];
static unsigned char reply[256];

static void die(const char *what) {
    fprintf(stderr, "scaled_regions: %s: %s\n", what, strerror(errno));
    exit(3);
}

static void full_write(const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(control, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("writing the control FIFO");
        }
        p += w;
        n -= (size_t)w;
    }
}

static void full_read(unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(ack, p, n);
        if (r == 0) { errno = EPIPE; die("reading the ack FIFO"); }
        if (r < 0) {
            if (errno == EINTR) continue;
            die("reading the ack FIFO");
        }
        p += r;
        n -= (size_t)r;
    }
}

/* Sends the body frame[4..4+len] and fails unless the runner answers Ack
 * (MessagePack fixstr "Ack": a3 41 63 6b). */
static void exchange(size_t len) {
    frame[0] = (unsigned char)len;
    frame[1] = (unsigned char)(len >> 8);
    frame[2] = frame[3] = 0;
    full_write(frame, len + 4);
    unsigned char header[4];
    full_read(header, 4);
    uint32_t n = header[0] | header[1] << 8 | header[2] << 16 | (uint32_t)header[3] << 24;
    if (n > sizeof reply) { errno = EMSGSIZE; die("the runner's reply"); }
    full_read(reply, n);
    if (n != 4 || memcmp(reply, "\xa3" "Ack", 4) != 0) {
        fprintf(stderr, "scaled_regions: the runner did not acknowledge a command\n");
        exit(3);
    }
}

/* A MessagePack fixstr (at most 31 bytes) at p; returns the bytes written. */
static size_t fixstr(unsigned char *p, const char *s) {
    size_t n = strlen(s);
    p[0] = (unsigned char)(0xa0 | n);
    memcpy(p + 1, s, n);
    return n + 1;
}

/* {"SetVersion": 1} */
static void set_version(void) {
    size_t n = 4;
    frame[n++] = 0x81;
    n += fixstr(frame + n, "SetVersion");
    frame[n++] = 0x01;
    exchange(n - 4);
}

/* {"CurrentBenchmark": {"pid": PID, "uri": URI}} */
static void current_benchmark(const char *uri) {
    uint32_t pid = (uint32_t)getpid();
    size_t n = 4;
    frame[n++] = 0x81;
    n += fixstr(frame + n, "CurrentBenchmark");
    frame[n++] = 0x82;
    n += fixstr(frame + n, "pid");
    frame[n++] = 0xce;
    frame[n++] = (unsigned char)(pid >> 24);
    frame[n++] = (unsigned char)(pid >> 16);
    frame[n++] = (unsigned char)(pid >> 8);
    frame[n++] = (unsigned char)pid;
    n += fixstr(frame + n, "uri");
    n += fixstr(frame + n, uri);
    exchange(n - 4);
}

/* "StartBenchmark" or "StopBenchmark" */
static void unit_command(const char *name) {
    exchange(fixstr(frame + 4, name));
}

static void *blocks[1000];

/* n blocks of size bytes, all live at once, freed unless keep. */
static void allocate(int n, size_t size, int keep) {
    for (int i = 0; i < n; i++) blocks[i] = malloc(size);
    if (!keep)
        for (int i = 0; i < n; i++) free(blocks[i]);
}

static void region(const char *uri, int n, size_t size, int keep) {
    if (control >= 0) {
        current_benchmark(uri);
        unit_command("StartBenchmark");
    }
    allocate(n, size, keep);
    if (control >= 0) unit_command("StopBenchmark");
}

int main(void) {
    const char *dir = getenv("MEMTRACK_FIFO_DIR");
    const char *scale = getenv("SCALED_PERCENT");
    int percent = scale ? atoi(scale) : 100;
    if (percent < 1 || percent > 1000) {
        fprintf(stderr, "scaled_regions: SCALED_PERCENT must be 1 to 1000\n");
        return 2;
    }
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/control.fifo", dir);
        if ((control = open(path, O_WRONLY | O_CLOEXEC)) < 0) die(path);
        snprintf(path, sizeof path, "%s/ack.fifo", dir);
        if ((ack = open(path, O_RDONLY | O_CLOEXEC)) < 0) die(path);
        set_version();
    } else {
        puts("not running under `memtrack run`: running unmeasured");
    }
    region("scaled::fixed", 100, 100, 0);
    region("scaled::grown", 100 * percent / 100, 100, 0);
    region("scaled::kept", 10, 64, 1);
    printf("scaled_regions: done (scale %d%%)\n", percent);
    return 0;
}
