//! criterion's API, wrapped: [`Criterion`], [`BenchmarkGroup`], [`Bencher`] and
//! [`BenchmarkId`] do what criterion's do (and call them), and count one iteration of
//! each benchmark with memtrack the first time it runs.

mod bencher;
mod criterion;
mod group;
mod id;

pub use self::criterion::Criterion;
pub use bencher::Bencher;
pub use group::BenchmarkGroup;
pub use id::{BenchmarkId, IntoBenchmarkId};
