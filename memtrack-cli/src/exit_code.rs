//! The exit codes of `memtrack`, in one place: the binary exits with these, `memtrack
//! --help` lists them ([`HELP`]), the book's "Limits and diffs in CI" explains them.
//!
//! memtrack's own codes sit in 201-204, where no common program's code does: 0-2 are
//! everyone's success, failure and usage error, 126 and 127 the shell's "cannot execute"
//! and "not found", 129-192 a signal (128 + its number, at most 64), 255 `exit(-1)`. A
//! command can still exit 201 itself: to tell for certain, read the command's exit
//! from the results (`exit_code` of its process in the JSON report).

/// Everything went well (`report`, `diff`), or the command exited 0 (`run`).
pub const SUCCESS: u8 = 0;

/// `memtrack run`: the command was found but is not an executable file (as a shell
/// says it).
pub const CANNOT_EXECUTE: u8 = 126;

/// `memtrack run`: the command was not found (as a shell says it).
pub const COMMAND_NOT_FOUND: u8 = 127;

/// memtrack itself failed: a usage error, missing privileges, a results directory it
/// refuses (`-o` holding earlier results without `--replace`), results it cannot read or
/// write, a limit it cannot check.
pub const MEMTRACK_FAILED: u8 = 201;

/// Events were lost, so some numbers are not exact (`lost_events` is not 0), and
/// `--fail-on-lost` was given.
pub const LOST_EVENTS: u8 = 202;

/// A limit was exceeded: a `--limit` (`run`, `report`), or a `--max-increase` (`diff`).
pub const LIMIT_EXCEEDED: u8 = 203;

/// `memtrack run`: some result files (or the `--json` file) could not be written (a
/// full disk, a quota): the report was printed from what memtrack held, and stderr
/// names each missing file and why. A later `report` or `diff` of the directory lacks
/// them.
pub const RESULTS_NOT_SAVED: u8 = 204;

/// The exit codes, for `memtrack --help`.
pub const HELP: &str = "\
Exit codes:
  N    memtrack run: the command's own exit code (128 + S when signal S killed it)
  126  memtrack run: the command is not an executable file
  127  memtrack run: the command was not found
  201  memtrack itself failed (usage, privileges, a results directory holding earlier
       results without --replace, results that cannot be read or written, a limit
       that matches nothing, report --stacks finding no stacks, diff of runs with
       nothing in common)
  202  events were lost (numbers not exact) and --fail-on-lost was given
  203  a limit was exceeded (--limit; memtrack diff --max-increase)
  204  memtrack run: results not saved (a full disk...): the report was printed, the
       files missing are named on stderr
201 wins over everything; then 204; then a failing command's code; then 203; then 202.";

/// What decides the exit code of a command that ran: its own code, and what memtrack
/// found in its results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The command's exit code (0-255; 128 + signal), or 0 for `memtrack report`.
    pub command: u8,
    /// Some limit was exceeded.
    pub limit_exceeded: bool,
    /// Events were lost and `--fail-on-lost` was given.
    pub lost_is_failure: bool,
    /// Some result file could not be written.
    pub not_saved: bool,
}

impl Outcome {
    /// The exit code: [`RESULTS_NOT_SAVED`] first (a CI job must not take a run whose
    /// results are missing for a good one; the command's code is in the report), then a
    /// failing command's own code (its failure is what happened; memtrack's findings
    /// are on stderr), then [`LIMIT_EXCEEDED`], then [`LOST_EVENTS`], else 0.
    pub fn code(self) -> u8 {
        if self.not_saved {
            RESULTS_NOT_SAVED
        } else if self.command != SUCCESS {
            self.command
        } else if self.limit_exceeded {
            LIMIT_EXCEEDED
        } else if self.lost_is_failure {
            LOST_EVENTS
        } else {
            SUCCESS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsaved_results_win_then_a_failing_command_then_limits_then_lost_events() {
        let all = Outcome {
            command: 3,
            limit_exceeded: true,
            lost_is_failure: true,
            not_saved: true,
        };
        assert_eq!(all.code(), RESULTS_NOT_SAVED);
        let saved = Outcome {
            not_saved: false,
            ..all
        };
        assert_eq!(saved.code(), 3);
        let all = saved;
        let ok_command = Outcome { command: 0, ..all };
        assert_eq!(ok_command.code(), LIMIT_EXCEEDED);
        let lost_only = Outcome {
            limit_exceeded: false,
            ..ok_command
        };
        assert_eq!(lost_only.code(), LOST_EVENTS);
        assert_eq!(Outcome::default().code(), SUCCESS);
    }

    #[test]
    fn memtracks_codes_are_none_a_program_or_a_signal_commonly_gives() {
        for code in [
            MEMTRACK_FAILED,
            LOST_EVENTS,
            LIMIT_EXCEEDED,
            RESULTS_NOT_SAVED,
        ] {
            assert!(code > 128 + 64 && code != 255, "{code}");
        }
        for code in [
            MEMTRACK_FAILED,
            LOST_EVENTS,
            LIMIT_EXCEEDED,
            RESULTS_NOT_SAVED,
            COMMAND_NOT_FOUND,
        ] {
            assert!(
                HELP.contains(&format!("  {code}  ")),
                "{code} not in the help"
            );
        }
    }
}
