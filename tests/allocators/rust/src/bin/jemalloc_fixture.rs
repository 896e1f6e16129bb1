//! jemalloc_fixture: the workload (src/lib.rs) with tikv-jemallocator (jemalloc
//! statically linked, symbols "_rjem_*"). Prints nothing; exit 0 = expected path.
#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    if !memtrack_allocator_fixtures::workload() {
        std::process::exit(86);
    }
}
