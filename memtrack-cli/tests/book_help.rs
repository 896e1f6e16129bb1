//! The book's CLI reference (docs/src/reference/cli.md) includes `memtrack --help` and
//! each command's `--help` from docs/src/reference/cli/*.txt; this test checks that each
//! file is what the binary prints now, so the reference cannot drift from the code.
//! After changing an option or a help text, write them again with
//!
//! ```sh
//! MEMTRACK_BLESS=1 cargo test -p memtrack-cli --test book_help
//! ```
//!
//! and commit the files. The help is printed 80 columns wide (`COLUMNS=80`), whatever
//! the terminal.

use std::{path::PathBuf, process::Command};

/// The help texts the book shows: the file under docs/src/reference/cli/ and the
/// arguments that print it.
const HELPS: [(&str, &[&str]); 4] = [
    ("memtrack.txt", &["--help"]),
    ("run.txt", &["run", "--help"]),
    ("report.txt", &["report", "--help"]),
    ("diff.txt", &["diff", "--help"]),
];

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memtrack"))
        .args(args)
        .env("COLUMNS", "80")
        .output()
        .expect("memtrack runs");
    assert!(
        out.status.success(),
        "memtrack {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

#[test]
fn the_books_cli_reference_is_the_binarys_help() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference/cli");
    let bless = std::env::var_os("MEMTRACK_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (file, args) in HELPS {
        let path = dir.join(file);
        let now = help(args);
        if bless {
            std::fs::write(&path, &now).expect("write the help file");
            continue;
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        if kept != now {
            stale.push(format!("{} (memtrack {})", path.display(), args.join(" ")));
        }
    }
    assert!(
        stale.is_empty(),
        "the book's help differs from the binary's: {stale:?}; run \
         MEMTRACK_BLESS=1 cargo test -p memtrack-cli --test book_help and commit the files"
    );
}
