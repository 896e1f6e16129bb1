//! system_fixture: the workload (src/lib.rs) with the default System allocator
//! (glibc malloc family), for the valgrind DHAT cross-check. Prints nothing.
fn main() {
    if !memtrack_allocator_fixtures::workload() {
        std::process::exit(86);
    }
}
