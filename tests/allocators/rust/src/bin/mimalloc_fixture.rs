//! mimalloc_fixture: the workload (src/lib.rs) with mimalloc::MiMalloc (mimalloc
//! statically linked, symbols "mi_*"). Prints nothing; exit 0 = expected path.
#[global_allocator]
static A: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if !memtrack_allocator_fixtures::workload() {
        std::process::exit(86);
    }
}
