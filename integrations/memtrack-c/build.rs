//! The shared library's SONAME: installed as `libmemtrack.so.0` (the C ABI's major
//! version), whatever cargo names the file it builds.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmemtrack.so.0");
}
