/* A program that dlopens and forks, for memtrack-cli's tests/kill_safety.rs: memtrack is
 * SIGKILLed at one moment of its run, and the program must still exit 0.
 *
 * At each phase it writes "PHASE PID\n" on fd 3 and waits for one byte on fd 4; end of
 * file on fd 4 means "go on without waiting" (the test closes it once memtrack is dead).
 * Without fds 3 and 4 it just runs.
 *
 *   main, dlopen libm                                   phases main, dlopen1
 *   fork child 1: dlopen libresolv, exit 0             phases child1, child1-dlopen
 *   wait for it                                         phase child1-exited
 *   dlopen libresolv                                    phase dlopen2
 *   fork child 2, which execs this program as "exec-child": dlopen libm, exit 0
 *                                                       phase exec-child
 *   wait for it                                         phase child2-exited
 *   phase done; memtrack is dead from here on in every test run:
 *   no breakpoint may be left on the loader's _dl_debug_state (r_debug.r_brk),
 *   dlopen libanl, fork child 3: dlopen libutil, exit 0; wait for it; exit 0.
 *
 * Every failure says what failed on stderr and makes the exit status non-zero (a child
 * that dies of a signal, e.g. SIGTRAP from a leftover breakpoint, included). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int synced = 1;

static void phase(const char *name) {
    if (!synced)
        return;
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", name, (int)getpid());
    if (write(3, line, (size_t)n) != n) {
        synced = 0; /* no test listening: run freely */
        return;
    }
    char go;
    ssize_t r;
    do {
        r = read(4, &go, 1);
    } while (r < 0 && errno == EINTR);
}

static int load(const char *library, const char *symbol) {
    void *handle = dlopen(library, RTLD_NOW);
    if (!handle) {
        fprintf(stderr, "dlopen_fork[%d]: dlopen %s: %s\n", (int)getpid(), library, dlerror());
        return 0;
    }
    if (symbol && !dlsym(handle, symbol)) {
        fprintf(stderr, "dlopen_fork[%d]: dlsym %s in %s: %s\n", (int)getpid(), symbol, library,
                dlerror());
        return 0;
    }
    return 1;
}

/* Forks a child that runs `body` and exits with its result; returns 1 if it exited 0. */
static int in_child(int (*body)(char **), char **argv, const char *what) {
    pid_t child = fork();
    if (child < 0) {
        perror("dlopen_fork: fork");
        return 0;
    }
    if (child == 0)
        _exit(body(argv));
    int status;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("dlopen_fork: waitpid");
            return 0;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "dlopen_fork: %s (pid %d) ended with status %#x%s%s\n", what, (int)child,
                status, WIFSIGNALED(status) ? ", signal " : "",
                WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "");
        return 0;
    }
    return 1;
}

static int child1(char **argv) {
    (void)argv;
    phase("child1");
    int ok = load("libresolv.so.2", NULL);
    phase("child1-dlopen");
    return ok ? 0 : 1;
}

static int child2(char **argv) {
    char *args[] = {argv[0], "exec-child", NULL};
    execv("/proc/self/exe", args);
    perror("dlopen_fork: execv /proc/self/exe");
    return 1;
}

static int child3(char **argv) {
    (void)argv;
    return load("libutil.so.1", NULL) ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "exec-child") == 0) {
        phase("exec-child");
        return load("libm.so.6", "cos") ? 0 : 1;
    }
    int ok = 1;
    phase("main");
    ok &= load("libm.so.6", "cos");
    phase("dlopen1");
    ok &= in_child(child1, argv, "child 1");
    phase("child1-exited");
    ok &= load("libresolv.so.2", NULL);
    phase("dlopen2");
    ok &= in_child(child2, argv, "child 2 (exec)");
    phase("child2-exited");
    phase("done");

    /* memtrack is gone: nothing of it may be left in this process. */
    unsigned char first = *(volatile unsigned char *)_r_debug.r_brk;
    if (first == 0xcc) {
        fprintf(stderr, "dlopen_fork: a breakpoint (int3) is left at _dl_debug_state %#lx\n",
                (unsigned long)_r_debug.r_brk);
        ok = 0;
    }
    ok &= load("libanl.so.1", NULL);
    ok &= in_child(child3, argv, "child 3");
    return ok ? 0 : 1;
}
