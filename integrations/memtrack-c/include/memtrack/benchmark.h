/*
 * memtrack/benchmark.h: memtrack's exact heap counts in Google Benchmark (1.7 and
 * later), header-only on memtrack's C ABI (memtrack.h, libmemtrack). Part of memtrack
 * (MIT OR Apache-2.0).
 *
 * One changed line: BENCHMARK_MAIN() becomes MEMTRACK_BENCHMARK_MAIN(), or, in a main
 * of your own, benchmark::RunSpecifiedBenchmarks() becomes
 * memtrack::benchmark::RunSpecifiedBenchmarks():
 *
 *     #include <benchmark/benchmark.h>
 *     #include <memtrack/benchmark.h>
 *
 *     static void BM_parse(benchmark::State& state) { for (auto _ : state) parse(); }
 *     BENCHMARK(BM_parse);
 *     MEMTRACK_BENCHMARK_MAIN();
 *
 *     c++ bench.cpp $(pkg-config --cflags --libs memtrack benchmark) -o bench
 *     memtrack run -- ./bench --benchmark_out=bench.json --benchmark_out_format=json
 *
 * Under `memtrack run`, it registers a benchmark::MemoryManager whose Start and Stop
 * are a memtrack region: Google Benchmark's JSON output then carries memtrack's exact
 * figures for every benchmark run, and memtrack's own results hold one region per run,
 * named after the benchmark (diff, limits, stacks, as for any region). Outside
 * `memtrack run` it registers nothing and Google Benchmark runs exactly as it would
 * without it.
 *
 * What the figures are: Google Benchmark (1.7.1) measures memory in a run of its own,
 * after the timed runs of each repetition: Start(), then min(16, the timed run's
 * iteration count) iterations of the benchmark on one thread, with the benchmark's
 * Setup and Teardown, then Stop(). memtrack counts every allocation call of the whole
 * process in between, so the figures are totals over those iterations, including what
 * Google Benchmark itself allocates for that run (one block for its thread manager,
 * plus the State's copy of the benchmark's arguments when it has any):
 *   num_allocs            = blocks handed out (memtrack's alloc_calls); Google
 *                           Benchmark prints allocs_per_iter = num_allocs / iterations
 *   max_bytes_used        = peak bytes live (peak_live_bytes)
 *   total_allocated_bytes = bytes handed out (bytes_allocated)
 *   net_heap_growth       = bytes allocated in the run and still live at its end
 *                           (live_bytes)
 * Google Benchmark 1.7's console output shows none of them; its JSON and CSV do.
 *
 * Names: Google Benchmark never tells a memory manager which benchmark it measures, so
 * each region starts as "google-benchmark run N" and is renamed to the benchmark's name
 * (e.g. "BM_parse/64") when Google Benchmark reports the benchmark's runs to the display
 * reporter, which memtrack::benchmark::RunSpecifiedBenchmarks wraps for that. Regions
 * are matched to runs in order, which holds unless --benchmark_enable_random_interleaving
 * is on (the names are then not reliable). A memtrack::benchmark::MemoryManager
 * registered by hand gives the same figures to Google Benchmark but leaves the regions
 * unnamed unless its runs are passed to NameRuns.
 */
#ifndef MEMTRACK_BENCHMARK_H
#define MEMTRACK_BENCHMARK_H

#include <benchmark/benchmark.h>
#include <memtrack.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace memtrack {
namespace benchmark {

/* A Google Benchmark memory manager whose Start/Stop are one memtrack region each.
 * (No `override` below: Stop(Result*) exists only up to Google Benchmark 1.7, where it
 * is the one called; it still overrides it there.) */
class MemoryManager : public ::benchmark::MemoryManager {
 public:
  /* Starts a region, provisionally named "google-benchmark run N". */
  void Start() {
    ++runs_;
    char uri[64];
    std::snprintf(uri, sizeof uri, "google-benchmark run %llu",
                  static_cast<unsigned long long>(runs_));
    if (!announced_) {
      announced_ = true;
      Check(memtrack_set_integration("memtrack-google-benchmark", "0"));
    }
    started_ = Check(memtrack_current_benchmark(uri)) &&
               Check(memtrack_region_start());
  }

  /* Google Benchmark 1.7 calls this one. */
  void Stop(Result* result) { Finish(*result); }
  /* Google Benchmark 1.8 and later call this one. */
  void Stop(Result& result) { Finish(result); }

  /* Names the regions of the runs Google Benchmark reports, in the order they ran: one
   * region per repetition. Called by the Reporter below for every report. */
  void NameRuns(const std::vector< ::benchmark::BenchmarkReporter::Run>& runs) {
    typedef ::benchmark::BenchmarkReporter::Run Run;
    bool any_iteration = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].run_type != Run::RT_Iteration) continue;
      any_iteration = true;
      NameNext(runs[i].run_name.str());
    }
    // Only aggregates reported (--benchmark_display_aggregates_only): they stand for
    // `repetitions` runs, unless the runs were named from an earlier report.
    if (!any_iteration && !runs.empty()) {
      const std::string name = runs[0].run_name.str();
      if (name != last_named_) {
        for (int64_t i = 0; i < runs[0].repetitions && !pending_.empty(); ++i) {
          NameNext(name);
        }
      }
    }
  }

 private:
  void Finish(Result& result) {
    if (!started_) return;  // Google Benchmark keeps its defaults (no figures)
    started_ = false;
    memtrack_counters c;
    if (!Check(memtrack_region_stop(&c))) return;
    result.num_allocs = static_cast<int64_t>(c.alloc_calls);
    result.max_bytes_used = static_cast<int64_t>(c.peak_live_bytes);
    result.total_allocated_bytes = static_cast<int64_t>(c.bytes_allocated);
    result.net_heap_growth = static_cast<int64_t>(c.live_bytes);
    if (c.lost_events != 0) {
      std::fprintf(stderr,
                   "memtrack: %llu events of a Google Benchmark memory run could not be "
                   "counted exactly; its figures are not exact\n",
                   static_cast<unsigned long long>(c.lost_events));
    }
    pending_.push_back(c.region);
  }

  void NameNext(const std::string& name) {
    last_named_ = name;
    if (pending_.empty()) return;
    const uint64_t region = pending_.front();
    pending_.pop_front();
    Check(memtrack_name_region(region, name.c_str()));
  }

  /* True on MEMTRACK_OK; says a failure on stderr once (MEMTRACK_INACTIVE silently). */
  bool Check(int status) {
    if (status == MEMTRACK_OK) return true;
    if (status != MEMTRACK_INACTIVE && !complained_) {
      complained_ = true;
      std::fprintf(stderr, "memtrack: %s (%s); further errors are not shown\n",
                   memtrack_last_error(), memtrack_status_name(status));
    }
    return false;
  }

  uint64_t runs_ = 0;
  bool started_ = false;
  bool announced_ = false;
  bool complained_ = false;
  std::deque<uint64_t> pending_;
  std::string last_named_;
};

/* A display reporter that names the memory manager's regions, then hands every report
 * to `inner` unchanged. */
class Reporter : public ::benchmark::BenchmarkReporter {
 public:
  Reporter(::benchmark::BenchmarkReporter* inner, MemoryManager* manager)
      : inner_(inner), manager_(manager) {
    SetOutputStream(&inner->GetOutputStream());
    SetErrorStream(&inner->GetErrorStream());
  }
  bool ReportContext(const Context& context) { return inner_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) {
    manager_->NameRuns(runs);
    inner_->ReportRuns(runs);
  }
  void Finalize() { inner_->Finalize(); }

 private:
  ::benchmark::BenchmarkReporter* inner_;
  MemoryManager* manager_;
};

namespace detail {

/* The value of flag `--NAME=` in this process's original command line (Google Benchmark
 * removes its flags from argv), else of environment variable `ENV`, else `fallback`. */
inline std::string Flag(const char* name, const char* env, const char* fallback) {
  std::string value;
  bool found = false;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string prefix = std::string("--") + name + "=";
  std::string arg;
  while (std::getline(cmdline, arg, '\0')) {
    if (arg.compare(0, prefix.size(), prefix) == 0) {
      value = arg.substr(prefix.size());
      found = true;
    }
  }
  if (found) return value;
  const char* from_env = std::getenv(env);
  return from_env != NULL ? std::string(from_env) : std::string(fallback);
}

inline bool Truthy(const std::string& v) {
  return v == "true" || v == "yes" || v == "1" || v == "on" || v == "t" || v == "y";
}

/* The display reporter Google Benchmark would make: --benchmark_format (console, json,
 * csv), with --benchmark_color and --benchmark_counters_tabular for the console. */
inline std::unique_ptr< ::benchmark::BenchmarkReporter> DefaultDisplayReporter() {
  const std::string format = Flag("benchmark_format", "BENCHMARK_FORMAT", "console");
  if (format == "json") {
    return std::unique_ptr< ::benchmark::BenchmarkReporter>(new ::benchmark::JSONReporter);
  }
  if (format == "csv") {
    BENCHMARK_DISABLE_DEPRECATED_WARNING
    return std::unique_ptr< ::benchmark::BenchmarkReporter>(new ::benchmark::CSVReporter);
    BENCHMARK_RESTORE_DEPRECATED_WARNING
  }
  const std::string color = Flag("benchmark_color", "BENCHMARK_COLOR", "auto");
  const char* term = std::getenv("TERM");
  const bool colored = color == "auto"
                           ? (isatty(STDOUT_FILENO) && term != NULL &&
                              std::strcmp(term, "dumb") != 0)
                           : Truthy(color);
  const bool tabular = Truthy(
      Flag("benchmark_counters_tabular", "BENCHMARK_COUNTERS_TABULAR", "false"));
  int options = ::benchmark::ConsoleReporter::OO_None;
  if (colored) options |= ::benchmark::ConsoleReporter::OO_Color;
  if (tabular) options |= ::benchmark::ConsoleReporter::OO_Tabular;
  return std::unique_ptr< ::benchmark::BenchmarkReporter>(new ::benchmark::ConsoleReporter(
      static_cast< ::benchmark::ConsoleReporter::OutputOptions>(options)));
}

}  // namespace detail

/* In place of benchmark::RunSpecifiedBenchmarks(display, file), after
 * benchmark::Initialize: under `memtrack run`, with memtrack's memory manager registered
 * and the display reporter (`display`, or the one Google Benchmark would make) wrapped
 * to name the regions; otherwise exactly Google Benchmark's call. Returns the number of
 * benchmarks run. */
inline size_t RunSpecifiedBenchmarks(::benchmark::BenchmarkReporter* display = NULL,
                                     ::benchmark::BenchmarkReporter* file = NULL) {
  if (!memtrack_is_tracked()) {
    if (std::getenv("MEMTRACK_FIFO_DIR") != NULL) {
      std::fprintf(stderr, "memtrack: %s; running without memory figures\n",
                   memtrack_last_error());
    }
    return ::benchmark::RunSpecifiedBenchmarks(display, file);
  }
  std::fprintf(stderr,
               "memtrack: under `memtrack run`: each benchmark's memory run is a memtrack "
               "region (timings are slowed by memtrack's probes)\n");
  MemoryManager manager;
  std::unique_ptr< ::benchmark::BenchmarkReporter> made;
  if (display == NULL) {
    made = detail::DefaultDisplayReporter();
    display = made.get();
  }
  Reporter naming(display, &manager);
  ::benchmark::RegisterMemoryManager(&manager);
  const size_t ran = ::benchmark::RunSpecifiedBenchmarks(&naming, file);
  ::benchmark::RegisterMemoryManager(NULL);
  return ran;
}

}  // namespace benchmark
}  // namespace memtrack

/* In place of BENCHMARK_MAIN(). */
#define MEMTRACK_BENCHMARK_MAIN()                                        \
  int main(int argc, char** argv) {                                      \
    ::benchmark::Initialize(&argc, argv);                                \
    if (::benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;  \
    ::memtrack::benchmark::RunSpecifiedBenchmarks();                     \
    ::benchmark::Shutdown();                                             \
    return 0;                                                            \
  }                                                                      \
  int main(int, char**)

#endif /* MEMTRACK_BENCHMARK_H */
