/*
 * Google Benchmark with memtrack's exact figures: benchmarks whose allocations are
 * known, so the figures Google Benchmark writes can be checked by hand (and are, by
 * integrations/memtrack-c/tests/google_benchmark.rs).
 *
 *   scripts/install-c-api.sh ~/.local
 *   export PKG_CONFIG_PATH=~/.local/lib/pkgconfig
 *   c++ -O2 integrations/memtrack-c/examples/google_benchmark.cpp
 *       $(pkg-config --cflags --libs memtrack-static benchmark) -o gbench
 *   sudo memtrack run -o results -- ./gbench --benchmark_out=gbench.json
 *       --benchmark_out_format=json
 *   memtrack report results
 *
 * In gbench.json each benchmark has Google Benchmark's memory fields; each is what one
 * memory run (min(16, iterations) iterations) did, plus Google Benchmark's own block
 * for that run (BM_empty shows it alone):
 *   BM_malloc_free_1000          16 iterations: 16 blocks of 1000 B more than
 *                                BM_empty, peak 1000 B more, nothing left
 *   BM_leak_100/iterations:4     4 blocks of 100 B more, all 400 B still live
 *   BM_vector_reserve/64/...:3   3 vectors of 64 ints (256 B each) more, plus the
 *                                State's copy of the argument (one 8 B block)
 */
#include <benchmark/benchmark.h>
#include <memtrack/benchmark.h>

#include <cstdlib>
#include <vector>

// Nothing allocated: Google Benchmark's own allocations in its memory run.
static void BM_empty(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_empty);

// One malloc(1000) and its free per iteration. No fixed iteration count: Google
// Benchmark's memory run then does 16 iterations.
static void BM_malloc_free_1000(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::malloc(1000);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_malloc_free_1000);

// 100 bytes per iteration, never freed: they make the net heap growth.
static void* leaked[64];
static void BM_leak_100(benchmark::State& state) {
  int i = 0;
  for (auto _ : state) {
    leaked[i++ % 64] = std::malloc(100);
    benchmark::DoNotOptimize(leaked);
  }
}
BENCHMARK(BM_leak_100)->Iterations(4);

// A vector of state.range(0) ints reserved and dropped per iteration.
static void BM_vector_reserve(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<int> v;
    v.reserve(static_cast<size_t>(state.range(0)));
    benchmark::DoNotOptimize(v.data());
  }
}
BENCHMARK(BM_vector_reserve)->Arg(64)->Iterations(3);

MEMTRACK_BENCHMARK_MAIN();
