//! A plain program that marks three benchmark regions over the FIFO protocol, with
//! allocations of known sizes inside them and noise outside, to be run under the runner:
//!
//! ```sh
//! cargo build --release -p memtrack-cli -p memtrack-examples
//! sudo target/release/memtrack run -- target/release/marked_regions
//! ```
//!
//! Expected in the runner's report, per benchmark (and nothing of the noise, which is
//! outside every region: the process's own totals are the three regions' sums):
//!
//! ```text
//! benchmark marked_regions::ten (process PID)
//!   allocations     10 blocks, 1000 B
//!   frees           10 blocks, 1000 B
//!   live at end     0 blocks, 0 B
//!   peak live       1000 B
//!   calls           free 10, malloc 10
//! benchmark marked_regions::hundred (process PID)
//!   allocations     100 blocks, 6.2 KiB (6,400 B)
//!   frees           100 blocks, 6.2 KiB (6,400 B)
//!   live at end     0 blocks, 0 B
//!   peak live       6.2 KiB (6,400 B)
//!   calls           free 100, malloc 100
//! benchmark marked_regions::thousand (process PID)
//!   allocations     1,000 blocks, 31.2 KiB (32,000 B)
//!   frees           0 blocks, 0 B
//!   live at end     1,000 blocks, 31.2 KiB (32,000 B)
//!   peak live       31.2 KiB (32,000 B)
//!   calls           malloc 1,000
//! ```
//!
//! With `--exit-inside` it then exits inside a fourth region, `marked_regions::unfinished`
//! (5 blocks of 1000 bytes and the 40-byte Vec holding them), which the runner lists as
//! unfinished.
//!
//! Run without the runner it says so and runs unmeasured. With `--garbage` it first
//! writes malformed frames straight into the runner's control FIFO (a robustness check:
//! the runner must answer them with errors and keep measuring).

use fifo_protocol::{FifoClient, Marker, now_ns};

/// Allocations outside every region, which the runner must not count.
#[allow(
    clippy::vec_box,
    reason = "each Box is one heap block: that is the point"
)]
fn noise(n: usize) -> Vec<Box<[u8; 333]>> {
    (0..n).map(|_| Box::new([7u8; 333])).collect()
}

// ANCHOR: region
/// Runs `body` as benchmark `uri`: markers around it, counting on only inside.
fn region(client: &mut Option<FifoClient>, uri: &str, body: impl FnOnce()) {
    let pid = std::process::id();
    if let Some(c) = client.as_mut() {
        c.current_benchmark(uri)
            .expect("runner answers CurrentBenchmark");
        c.add_marker(Marker::BenchmarkStart {
            timestamp_ns: now_ns(),
        })
        .expect("runner answers AddMarker");
        c.start_benchmark().expect("runner answers StartBenchmark");
    }
    body();
    if let Some(c) = client.as_mut() {
        c.stop_benchmark().expect("runner answers StopBenchmark");
        c.add_marker(Marker::BenchmarkEnd {
            timestamp_ns: now_ns(),
        })
        .expect("runner answers AddMarker");
    }
    println!("{uri}: done (pid {pid})");
}
// ANCHOR_END: region

/// Writes malformed frames straight into the control FIFO, bypassing the client, and
/// reads the runner's answer to each from the ack FIFO: it must be `Reply::Err`.
fn write_garbage() {
    use std::io::Write;
    let Some(dir) = std::env::var_os(fifo_protocol::FIFO_DIR_ENV) else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let control = dir.join(fifo_protocol::CONTROL_FIFO_NAME);
    let mut fifo = std::fs::OpenOptions::new()
        .write(true)
        .open(&control)
        .expect("the control FIFO opens");
    let mut ack =
        std::fs::File::open(dir.join(fifo_protocol::ACK_FIFO_NAME)).expect("the ack FIFO opens");
    let garbage: [&[u8]; 2] = [
        // A valid length with a body that is not MessagePack of any command.
        &[5, 0, 0, 0, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1],
        // A frame claiming 4 GiB.
        &[0xff, 0xff, 0xff, 0xff],
    ];
    for bytes in garbage {
        fifo.write_all(bytes).expect("write garbage");
        let reply: fifo_protocol::Reply =
            fifo_protocol::frame::read_frame(&mut ack).expect("the runner answers garbage");
        match reply {
            fifo_protocol::Reply::Err { message } => println!("runner answered garbage: {message}"),
            other => panic!("the runner accepted garbage: {other:?}"),
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--garbage") {
        write_garbage();
    }
    let mut client = match FifoClient::from_env() {
        None => {
            println!("not running under `memtrack run`: running unmeasured");
            None
        }
        Some(Ok(mut c)) => {
            c.set_version()
                .expect("runner accepts the protocol version");
            c.set_integration("marked_regions", env!("CARGO_PKG_VERSION"))
                .expect("runner answers SetIntegration");
            Some(c)
        }
        Some(Err(e)) => {
            eprintln!("memtrack runner unreachable ({e}): running unmeasured");
            None
        }
    };

    let kept_noise = noise(5);

    // Storage for the blocks, made outside the regions so only the blocks count.
    let mut ten: Vec<Option<Box<[u8; 100]>>> = Vec::with_capacity(10);
    let mut hundred: Vec<Option<Box<[u8; 64]>>> = Vec::with_capacity(100);
    let mut thousand: Vec<Option<Box<[u8; 32]>>> = Vec::with_capacity(1000);

    region(&mut client, "marked_regions::ten", || {
        for _ in 0..10 {
            ten.push(Some(Box::new([1u8; 100])));
        }
        for slot in ten.iter_mut() {
            *slot = None;
        }
    });
    drop(noise(3));

    region(&mut client, "marked_regions::hundred", || {
        for _ in 0..100 {
            hundred.push(Some(Box::new([2u8; 64])));
        }
        for slot in hundred.iter_mut() {
            *slot = None;
        }
    });
    drop(noise(3));

    region(&mut client, "marked_regions::thousand", || {
        for _ in 0..1000 {
            thousand.push(Some(Box::new([3u8; 32])));
        }
    });
    // Freed outside the region: not counted.
    drop(thousand);
    drop(noise(3));
    drop(kept_noise);

    if std::env::args().any(|a| a == "--exit-inside")
        && let Some(c) = client.as_mut()
    {
        // A benchmark the process ends inside (as a panic or a signal would end it):
        // the runner lists it as unfinished, with what it counted: 5 blocks of 1000
        // bytes and the Vec holding them.
        c.current_benchmark("marked_regions::unfinished")
            .expect("runner answers CurrentBenchmark");
        c.start_benchmark().expect("runner answers StartBenchmark");
        let unfinished: Vec<Box<[u8; 1000]>> = (0..5).map(|_| Box::new([4u8; 1000])).collect();
        std::hint::black_box(&unfinished);
        std::process::exit(0);
    }
}
