/* The loader hook's signals, seen from the tracked program (memtrack-core's
 * tests/ld_hook.rs). memtrack stops a thread at the dynamic loader's _dl_debug_state by
 * sending it SIGURG, SIGWINCH or SIGCHLD (the first it does not block) and suppresses
 * that signal; signals the program gets from elsewhere must still reach it, once each.
 *
 * Usage: ld_hook_signals BLOCKED, BLOCKED a comma-separated subset of urg,winch,chld (or
 * "none"). The program counts each of the three signals in a handler, blocks BLOCKED,
 * raises each unblocked one once itself, then dlopens libjemalloc.so.2 (RTLD_LOCAL: it
 * replaces nothing) and makes 3 mallocx(4096, 0) calls, freed with dallocx: counted by
 * memtrack only if the hook stopped the thread before jemalloc ran. It exits 0 when each
 * unblocked signal reached its handler exactly once and no blocked one did.
 *
 * Needs GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 (jemalloc's static TLS, see
 * tests/allocators/dlopen_jemalloc.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t got[65];

static void count(int sig) { got[sig]++; }

static const struct {
    const char *name;
    int sig;
} signals[] = {{"urg", SIGURG}, {"winch", SIGWINCH}, {"chld", SIGCHLD}};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ld_hook_signals urg,winch,chld|none\n");
        return 2;
    }
    sigset_t blocked;
    sigemptyset(&blocked);
    int is_blocked[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = count;
        sigaction(signals[i].sig, &action, NULL);
        if (strstr(argv[1], signals[i].name)) {
            sigaddset(&blocked, signals[i].sig);
            is_blocked[i] = 1;
        }
    }
    sigprocmask(SIG_BLOCK, &blocked, NULL);
    for (int i = 0; i < 3; i++)
        if (!is_blocked[i])
            raise(signals[i].sig);

    void *jemalloc = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!jemalloc) {
        fprintf(stderr, "ld_hook_signals: dlopen libjemalloc.so.2: %s\n", dlerror());
        return 1;
    }
    void *(*mallocx)(size_t, int) = (void *(*)(size_t, int))dlsym(jemalloc, "mallocx");
    void (*dallocx)(void *, int) = (void (*)(void *, int))dlsym(jemalloc, "dallocx");
    if (!mallocx || !dallocx) {
        fprintf(stderr, "ld_hook_signals: no mallocx/dallocx in libjemalloc.so.2\n");
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        void *p = mallocx(4096, 0);
        if (!p)
            return 1;
        dallocx(p, 0);
    }

    int ok = 1;
    for (int i = 0; i < 3; i++) {
        int want = is_blocked[i] ? 0 : 1;
        if (got[signals[i].sig] != want) {
            fprintf(stderr, "ld_hook_signals: SIG%s reached the handler %d times, expected %d\n",
                    signals[i].name, (int)got[signals[i].sig], want);
            ok = 0;
        }
    }
    return ok ? 0 : 1;
}
