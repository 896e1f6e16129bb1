//! [`BenchmarkId`]: criterion's, with its parts readable (memtrack names the benchmark
//! by them).

use std::fmt;

/// A benchmark's id within a group: a function name, a parameter, or both (criterion's
/// `BenchmarkId`). The full id of a benchmark is `group/function/parameter`, the parts
/// that are set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BenchmarkId {
    pub(crate) function: Option<String>,
    pub(crate) parameter: Option<String>,
}

impl BenchmarkId {
    /// An id of a function name and a parameter value (`function/parameter`).
    pub fn new<S: Into<String>, P: fmt::Display>(function_name: S, parameter: P) -> Self {
        BenchmarkId {
            function: Some(function_name.into()),
            parameter: Some(parameter.to_string()),
        }
    }

    /// An id of a parameter value alone (one function over several inputs).
    pub fn from_parameter<P: fmt::Display>(parameter: P) -> Self {
        BenchmarkId {
            function: None,
            parameter: Some(parameter.to_string()),
        }
    }

    /// The full id of this benchmark in group `group`, as criterion names it.
    pub(crate) fn full_id(&self, group: &str) -> String {
        let mut id = group.to_string();
        for part in [&self.function, &self.parameter].into_iter().flatten() {
            id.push('/');
            id.push_str(part);
        }
        id
    }

    /// criterion's id for the same benchmark, handed with `input` and `f` to criterion's
    /// group `bench_with_input`.
    pub(crate) fn apply_with_input<'a, M, F, I>(
        self,
        group: &mut ::criterion::BenchmarkGroup<'a, M>,
        input: &I,
        f: F,
    ) where
        M: ::criterion::measurement::Measurement,
        F: FnMut(&mut ::criterion::Bencher<'_, M>, &I),
        I: ?Sized,
    {
        match (self.function, self.parameter) {
            (Some(function), Some(parameter)) => {
                group.bench_with_input(::criterion::BenchmarkId::new(function, parameter), input, f)
            }
            (None, Some(parameter)) => group.bench_with_input(
                ::criterion::BenchmarkId::from_parameter(parameter),
                input,
                f,
            ),
            (Some(function), None) => group.bench_with_input(function, input, f),
            (None, None) => unreachable!("no public constructor makes an empty id"),
        };
    }
}

impl fmt::Display for BenchmarkId {
    /// `function/parameter`, the parts that are set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<&str> = [&self.function, &self.parameter]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        f.write_str(&parts.join("/"))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::BenchmarkId {}
    impl<S: Into<String>> Sealed for S {}
}

/// What a group's `bench_function` and `bench_with_input` take as an id: a
/// [`BenchmarkId`], or a function name (criterion's `IntoBenchmarkId`).
pub trait IntoBenchmarkId: sealed::Sealed {
    /// The id.
    fn into_benchmark_id(self) -> BenchmarkId;
}

impl IntoBenchmarkId for BenchmarkId {
    fn into_benchmark_id(self) -> BenchmarkId {
        self
    }
}

impl<S: Into<String>> IntoBenchmarkId for S {
    /// A function name; panics if it is empty, as criterion does.
    fn into_benchmark_id(self) -> BenchmarkId {
        let function = self.into();
        assert!(!function.is_empty(), "Function name must not be empty.");
        BenchmarkId {
            function: Some(function),
            parameter: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_ids_are_criterions() {
        assert_eq!(BenchmarkId::new("grow", 100).full_id("vec"), "vec/grow/100");
        assert_eq!(BenchmarkId::from_parameter(8).full_id("vec"), "vec/8");
        assert_eq!("grow".into_benchmark_id().full_id("vec"), "vec/grow");
        assert_eq!(BenchmarkId::new("grow", 100).to_string(), "grow/100");
    }
}
