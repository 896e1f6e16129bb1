//! What a command wrote before it exited is all handled when the runner stops, and a
//! flood of malformed frames is told in one line.

use std::io::Write;
use std::path::Path;

use fifo_protocol::{CONTROL_FIFO_NAME, FifoRunner, IntegrationMode, LogSummary, SharedHandling};

#[test]
fn every_frame_written_before_stop_is_handled_and_summed_up_once() {
    let mut runner = FifoRunner::new(IntegrationMode::Memory).unwrap();
    let log = LogSummary::new();
    runner.set_logger(log.logger());
    let (_, dir) = runner.env_var();
    let serving = runner.spawn(SharedHandling).unwrap();

    // 100,000 frames whose 1-byte body (0xc1) is not MessagePack; nobody reads the
    // replies. write_all returns once the last byte is in the pipe.
    let mut control = std::fs::OpenOptions::new()
        .write(true)
        .open(Path::new(&dir).join(CONTROL_FIFO_NAME))
        .unwrap();
    control
        .write_all(&[1, 0, 0, 0, 0xc1].repeat(100_000))
        .unwrap();
    drop(control);
    serving.stop().unwrap();

    assert_eq!(log.count(), 100_000);
    let line = log.line().unwrap();
    assert!(
        line.starts_with(
            "100000 problems; the first: skipped a malformed frame: cannot decode 1-byte frame \
             body as a Command"
        ),
        "{line}"
    );
}
