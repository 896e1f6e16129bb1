//! A client inherited through `fork()` keeps working in parent and child at once. The only
//! test in its binary, since it forks.

use fifo_protocol::{FifoClient, FifoRunner, IntegrationMode, SharedHandling};

#[test]
fn forked_clients_take_turns_with_their_parent() {
    let runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();
    let mut client = FifoClient::connect(&dir).unwrap();
    client.ping().unwrap();

    // SAFETY: the child only uses the client (glibc's malloc is fork-safe) and leaves
    // with _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    let is_child = pid == 0;
    // Parent and child hammer the runner concurrently with commands whose replies differ,
    // so a reply delivered to the wrong process is caught.
    let mut failures = 0;
    for round in 0..200 {
        let ok = if (round % 2 == 0) == is_child {
            client.ping().is_ok()
        } else {
            matches!(client.integration_mode(), Ok(IntegrationMode::Memory))
        };
        if !ok {
            failures += 1;
        }
    }
    if is_child {
        // SAFETY: terminates the child without running the parent's destructors.
        unsafe { libc::_exit(if failures == 0 { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child crashed: status {status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "child saw wrong or missing replies"
    );
    assert_eq!(failures, 0, "parent saw wrong or missing replies");

    serving.stop().unwrap();
}
