//! A full disk loses nothing memtrack can keep (issue 35): with the results directory on
//! a full file system (a small tmpfs, filled), `memtrack run` still prints the report
//! on stderr and writes `--json` elsewhere, names each result file it could not write
//! (its own name, not a temporary one) and why, leaves no partial file, and exits 204.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
};

use memtrack_cli::exit_code::RESULTS_NOT_SAVED;

/// A tmpfs of 256 KiB mounted on a new directory, unmounted when dropped (a failing
/// test included).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Self {
        std::fs::create_dir(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs"])
            .arg(at)
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs on {}", at.display());
        Tmpfs(at.to_path_buf())
    }

    /// Writes a file until the file system says it is full.
    fn fill(&self) {
        let mut filler = std::fs::File::create(self.0.join("filler")).unwrap();
        let page = [0u8; 4096];
        loop {
            match filler.write_all(&page) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.0.display()),
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.0).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // Busy (a process of a failed test still in it): detach it now, freed
            // when the last user goes.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_full_disk_keeps_the_report_and_names_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&tmp.path().join("disk"));
    let results = disk.0.join("results");
    std::fs::create_dir(&results).unwrap();
    disk.fill();
    let (json_elsewhere, json_on_disk) = (tmp.path().join("run.json"), disk.0.join("run.json"));
    let run = |json: &Path| {
        Command::new(env!("CARGO_BIN_EXE_memtrack"))
            .args(["run", "--replace", "-o"])
            .arg(&results)
            .arg("--json")
            .arg(json)
            .arg("--")
            .arg(memtrack_test_support::program("scaled_regions"))
            .output()
            .unwrap()
    };
    let out = run(&json_elsewhere);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(RESULTS_NOT_SAVED)),
        "{stderr}"
    );

    // The JSON report, elsewhere, has every count.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_elsewhere).unwrap()).unwrap();
    let process = &json["processes"][0];
    let pid = process["pid"].as_u64().unwrap();
    let benchmarks: Vec<(&str, u64)> = process["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["uri"].as_str().unwrap(),
                b["stats"]["alloc_calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        benchmarks,
        [
            ("scaled::fixed", 100),
            ("scaled::grown", 100),
            ("scaled::kept", 10)
        ]
    );
    // The human report on stderr, then one line per missing file, then the summary.
    assert!(
        stderr.contains(&format!("process {pid} ")) && stderr.contains("scaled::grown"),
        "{stderr}"
    );
    let enospc = "No space left on device (os error 28)";
    let expected = format!(
        "memtrack: not saved: {dir}/{pid}.MemtrackResult.msgpack (the result of process \
         {pid}): {enospc}\nmemtrack: not saved: {dir}/MarkerResult.msgpack (the \
         integrations' benchmark markers): {enospc}\nmemtrack: 2 files not saved: the \
         report above is complete, {dir} lacks them\n",
        dir = results.display()
    );
    assert!(stderr.ends_with(&expected), "{stderr}");
    assert!(
        !stderr.contains(".tmp-"),
        "a temporary file named: {stderr}"
    );
    // Nothing partial left.
    let left: Vec<_> = std::fs::read_dir(&results).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");

    // The JSON report on the full disk too: named as well, the report still printed.
    let out = run(&json_on_disk);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(RESULTS_NOT_SAVED)),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "\nmemtrack: not saved: {} (the JSON report, --json): {enospc}\n",
            json_on_disk.display()
        )) && stderr.ends_with(&format!(
            "memtrack: 3 files not saved: the report above is complete, {} lacks them\n",
            results.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("scaled::grown"), "{stderr}");
    assert!(!json_on_disk.exists());
}
