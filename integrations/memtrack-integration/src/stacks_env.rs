//! `MEMTRACK_STACKS`: call stacks for in-process counting. Under `memtrack run` the
//! runner records stacks (`memtrack run --stacks`), per benchmark region; in-process,
//! this variable asks each counted iteration's tracker for them
//! ([`TrackerBuilder::stacks`](memtrack::TrackerBuilder::stacks)), and they are saved
//! beside the result file.

use std::sync::OnceLock;

/// The environment variable: unset, empty or `0` for no stacks, `1` to `MAX_DEPTH`
/// ([`memtrack::stacks::MAX_DEPTH`]) for that many frames, `max` for the most.
pub const STACKS_ENV: &str = "MEMTRACK_STACKS";

/// What [`STACKS_ENV`] asks for: a depth, or why the value is refused.
static REQUESTED: OnceLock<Result<Option<u32>, String>> = OnceLock::new();

fn requested() -> &'static Result<Option<u32>, String> {
    REQUESTED.get_or_init(|| parse(std::env::var(STACKS_ENV).ok().as_deref()))
}

/// Parses a value of [`STACKS_ENV`].
fn parse(value: Option<&str>) -> Result<Option<u32>, String> {
    match value.map(str::trim) {
        None | Some("") | Some("0") => Ok(None),
        Some(v) => memtrack::stacks::parse_depth(v)
            .map(Some)
            .map_err(|e| format!("{STACKS_ENV}={e}; 0 for none")),
    }
}

/// The stack depth in-process trackers use (None: no stacks, also when the value is
/// refused: the line the integration prints says so).
pub fn stack_depth() -> Option<u32> {
    requested().clone().ok().flatten()
}

/// The one line the session prints about stacks, if any: what in-process counting
/// records, that the variable does not apply under the runner, or why it was refused.
pub(crate) fn line(in_process: bool) -> Option<String> {
    match requested() {
        Ok(None) => None,
        Err(reason) => Some(format!("memtrack: {reason}: no call stacks recorded")),
        Ok(Some(depth)) if in_process => Some(format!(
            "memtrack: {STACKS_ENV}: the call stacks of each counted iteration (up to \
             {depth} frames) are saved beside its result (`memtrack report --stacks DIR`)"
        )),
        Ok(Some(_)) => Some(format!(
            "memtrack: {STACKS_ENV} applies to in-process counting; under `memtrack run`, \
             call stacks are recorded with `memtrack run --stacks`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn values_are_depths_off_or_refused() {
        let max = memtrack::stacks::MAX_DEPTH;
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some("")), Ok(None));
        assert_eq!(parse(Some("0")), Ok(None));
        assert_eq!(parse(Some("8")), Ok(Some(8)));
        assert_eq!(parse(Some(" 3 ")), Ok(Some(3)));
        assert_eq!(parse(Some("max")), Ok(Some(max)));
        assert_eq!(parse(Some(&max.to_string())), Ok(Some(max)));
        for bad in [(max + 1).to_string(), "-1".to_string(), "deep".to_string()] {
            let err = parse(Some(&bad)).unwrap_err();
            assert!(
                err.contains(&format!("{bad:?} is not a stack depth from 1 to {max}")),
                "{err}"
            );
        }
    }
}
