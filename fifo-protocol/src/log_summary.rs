//! Tells many log lines in one: a runner fed garbage logs a line per frame it rejects, and
//! a command writing 100,000 malformed frames must not print 100,000 lines.

use std::sync::{Arc, Mutex, PoisonError};

/// Collects a [`FifoRunner`](crate::FifoRunner)'s log lines ([`logger`](Self::logger),
/// for [`FifoRunner::set_logger`](crate::FifoRunner::set_logger)) and sums them up in one
/// line once serving ended ([`line`](Self::line)): how many, and the first in full.
///
/// Cloneable; clones share the same record.
#[derive(Debug, Clone, Default)]
pub struct LogSummary {
    inner: Arc<Mutex<Logged>>,
}

#[derive(Debug, Default)]
struct Logged {
    count: u64,
    first: Option<String>,
}

impl LogSummary {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// A logger that records into this summary.
    pub fn logger(&self) -> impl FnMut(&str) + Send + 'static {
        let inner = Arc::clone(&self.inner);
        move |line| {
            let mut logged = inner.lock().unwrap_or_else(PoisonError::into_inner);
            logged.count += 1;
            if logged.first.is_none() {
                logged.first = Some(line.to_owned());
            }
        }
    }

    /// How many lines were logged.
    pub fn count(&self) -> u64 {
        self.lock().count
    }

    /// One line telling everything logged, or `None` if nothing was: the line itself
    /// when there was one, else `"{count} problems; the first: {line}"`.
    pub fn line(&self) -> Option<String> {
        let logged = self.lock();
        let first = logged.first.as_deref()?;
        Some(match logged.count {
            1 => first.to_owned(),
            n => format!("{n} problems; the first: {first}"),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Logged> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_lines_become_one_with_the_count_and_the_first() {
        let summary = LogSummary::new();
        assert_eq!(summary.line(), None);
        let mut log = summary.logger();
        log("skipped a malformed frame: A");
        assert_eq!(
            summary.line().as_deref(),
            Some("skipped a malformed frame: A")
        );
        for _ in 0..99_999 {
            log("skipped a malformed frame: B");
        }
        assert_eq!(summary.count(), 100_000);
        assert_eq!(
            summary.line().as_deref(),
            Some("100000 problems; the first: skipped a malformed frame: A")
        );
    }
}
