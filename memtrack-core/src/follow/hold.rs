//! A testing aid: `MEMTRACK_TEST_HOLD=POINT[:N]` makes the follower stop for good the
//! N-th time (the first if `:N` is left out) it reaches POINT, after printing
//! `memtrack: test hold: POINT N pid PID` on stderr, so that a test can kill memtrack at
//! exactly that moment of the tracked program (memtrack-cli's tests/kill_safety.rs:
//! what a SIGKILL of memtrack leaves behind). The points, as [`Hold`] names them:
//! `spawn`, `seized`, `exec`, `hook`, `fork`, `exit`. Unset (or unparsable), nothing is
//! held. A held follower never comes back: only for processes that will be killed.
//!
//! Another testing aid, [`load_gate`]: `MEMTRACK_TEST_LOAD_GATE=FIFO` makes a spawning
//! tracker wait, once its programs are loaded and before the command is let go, until a
//! test has opened the FIFO (a named pipe) for writing and closed it again, so that the
//! test can act while the load is surely still in progress (memtrack-cli's tests/cli.rs:
//! signals sent to memtrack then are forwarded to the command, not lost). Unset, nothing
//! waits.

use std::collections::HashMap;

/// A moment of the follower's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Hold {
    /// The command is forked and waits before its exec; not traced yet.
    Spawn,
    /// The command is traced, not yet let go to its exec.
    Seized,
    /// A process is at its exec stop, not probed yet.
    Exec,
    /// A thread is at a loader-hook stop, the new objects not probed yet.
    Hook,
    /// A new process is at its first stop after its fork, not probed yet.
    Fork,
    /// A process exited; the follower has recorded it.
    Exit,
}

impl Hold {
    fn name(self) -> &'static str {
        match self {
            Hold::Spawn => "spawn",
            Hold::Seized => "seized",
            Hold::Exec => "exec",
            Hold::Hook => "hook",
            Hold::Fork => "fork",
            Hold::Exit => "exit",
        }
    }

    fn parse(name: &str) -> Option<Hold> {
        [
            Hold::Spawn,
            Hold::Seized,
            Hold::Exec,
            Hold::Hook,
            Hold::Fork,
            Hold::Exit,
        ]
        .into_iter()
        .find(|h| h.name() == name)
    }
}

/// The hold asked for, and how often each point was reached.
#[derive(Default)]
pub(crate) struct Holds {
    /// (point, the how-manieth time to hold at it; from 1).
    at: Option<(Hold, u32)>,
    reached: HashMap<Hold, u32>,
}

impl Holds {
    /// The hold `MEMTRACK_TEST_HOLD` asks for, if any.
    pub(crate) fn from_env() -> Holds {
        let at = std::env::var("MEMTRACK_TEST_HOLD")
            .ok()
            .and_then(|v| parse(&v));
        Holds {
            at,
            reached: HashMap::new(),
        }
    }

    /// The follower is at `point` (in process `pid`): holds for good if asked to.
    pub(crate) fn reached(&mut self, point: Hold, pid: u32) {
        let Some((hold, n)) = self.at else {
            return;
        };
        if hold != point {
            return;
        }
        let count = self.reached.entry(point).or_insert(0);
        *count += 1;
        if *count == n {
            eprintln!("memtrack: test hold: {} {n} pid {pid}", point.name());
            loop {
                std::thread::park();
            }
        }
    }
}

/// The testing gate (module doc): with `MEMTRACK_TEST_LOAD_GATE=FIFO` set, prints
/// `memtrack: test load gate: FIFO` on stderr, then opens FIFO for reading (which waits
/// for a writer) and reads it to its end (the writer's close). Unset, returns at once;
/// an error opening or reading FIFO ends the wait.
pub(crate) fn load_gate() {
    let Some(path) = std::env::var_os("MEMTRACK_TEST_LOAD_GATE") else {
        return;
    };
    eprintln!(
        "memtrack: test load gate: {}",
        std::path::Path::new(&path).display()
    );
    if let Ok(mut fifo) = std::fs::File::open(&path) {
        let _ = std::io::Read::read_to_end(&mut fifo, &mut Vec::new());
    }
}

fn parse(value: &str) -> Option<(Hold, u32)> {
    let (name, n) = match value.split_once(':') {
        Some((name, n)) => (name, n.parse().ok().filter(|&n| n > 0)?),
        None => (value, 1),
    };
    Some((Hold::parse(name)?, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_points_and_counts() {
        assert_eq!(parse("hook:3"), Some((Hold::Hook, 3)));
        assert_eq!(parse("spawn"), Some((Hold::Spawn, 1)));
        assert_eq!(parse("exit:1"), Some((Hold::Exit, 1)));
        assert_eq!(parse("hook:0"), None);
        assert_eq!(parse("hook:x"), None);
        assert_eq!(parse("nowhere"), None);
    }

    #[test]
    fn other_points_and_earlier_times_pass() {
        let mut holds = Holds {
            at: Some((Hold::Hook, 3)),
            reached: HashMap::new(),
        };
        holds.reached(Hold::Fork, 1);
        holds.reached(Hold::Hook, 1);
        holds.reached(Hold::Hook, 1);
        assert_eq!(holds.reached[&Hold::Hook], 2);
        assert!(!holds.reached.contains_key(&Hold::Fork));
    }
}
