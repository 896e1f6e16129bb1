/*
 * The C++ allocation path: `new char[n]` / `delete[]` pairs, n = 64 + i % 100.
 *
 *   new_delete [OPS]     (OPS defaults to 1,000,000; 0 is the baseline run)
 *
 * libstdc++'s operator new[] calls operator new, which calls malloc; delete[] ends in
 * free. memtrack probes malloc/free in libc, so each pair counts as one malloc and one
 * free of n bytes (char arrays have no array cookie). Prints ns per pair (timing.h).
 */
#include "timing.h"

int main(int argc, char **argv)
{
    long long entered = bench_now_ns();
    long ops = bench_count_arg(argc, argv, 1, 1000000);
    struct bench_mark start = bench_mark();
    for (long i = 0; i < ops; i++) {
        char *p = new char[64 + i % 100];
        bench_sink = p;
        delete[] p;
    }
    bench_report(entered, start, ops);
    return 0;
}
