//! Repeated measurements and the statistics the report uses (median, min, max).
//!
//! Kept apart so every benchmark summarises the same way: figures are medians of
//! independent runs, each run a separate process (or a separate Tracker).

/// The values of one measurement over several runs, in the order measured.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    values: Vec<f64>,
}

impl Samples {
    /// No values yet.
    pub fn new() -> Samples {
        Samples::default()
    }

    /// Adds one run's value.
    pub fn push(&mut self, value: f64) {
        self.values.push(value);
    }

    /// The values, in the order measured.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values in ascending order.
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The median (mean of the two middle values for an even count); NaN when empty.
    pub fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// The smallest value; NaN when empty.
    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }

    /// The largest value; NaN when empty.
    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }
}

impl FromIterator<f64> for Samples {
    fn from_iter<I: IntoIterator<Item = f64>>(iter: I) -> Self {
        Samples {
            values: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let odd: Samples = [3.0, 1.0, 2.0].into_iter().collect();
        assert_eq!((odd.median(), odd.min(), odd.max()), (2.0, 1.0, 3.0));
        let even: Samples = [4.0, 1.0, 3.0, 2.0].into_iter().collect();
        assert_eq!(even.median(), 2.5);
        assert!(Samples::new().median().is_nan());
    }
}
