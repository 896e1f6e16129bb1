//! The building blocks every report section renders with: numbers formatted for the
//! tables, the Markdown table itself, and JSON values (shared by report.rs and
//! stacks_report.rs; it knows no benchmark).

use num_format::{Locale, ToFormattedString};
pub(crate) use serde_json::Value as Json;
use tabled::{
    builder::Builder,
    grid::config::Offset,
    settings::{Alignment, Style, object::Columns, style::LineChar},
};

use crate::samples::Samples;

/// ns with a precision that suits its size: "9.3", "1,234".
pub(crate) fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    if ns < 100.0 {
        return format!("{ns:.1}");
    }
    thousands(ns.round() as u64)
}

/// `n` with thousands separators: "1,000,000".
pub(crate) fn thousands(n: u64) -> String {
    n.to_formatted_string(&Locale::en)
}

/// How a Markdown table column is aligned when rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Align {
    /// Text: `|---|`.
    Left,
    /// Numbers: `|--:|`.
    Right,
}
use Align::Right;

/// A Markdown pipe table: the header, the alignment row (`---` or `--:` per column of
/// `align`), then `rows`; cells are padded to their column's width (numbers to the
/// right) so the source reads as a table too. Ends with an empty line.
pub(crate) fn markdown_table(header: &[&str], align: &[Align], rows: Vec<Vec<String>>) -> String {
    assert_eq!(header.len(), align.len(), "one alignment per column");
    let mut builder = Builder::default();
    builder.push_record(header.iter().copied());
    let empty = rows.is_empty();
    for row in rows {
        assert_eq!(row.len(), header.len(), "{row:?}: one cell per column");
        builder.push_record(row);
    }
    if empty {
        // The alignment row is the line above the first row: give it one to sit on.
        builder.push_record(header.iter().map(|_| ""));
    }
    let mut table = builder.build();
    table.with(Style::markdown());
    for (column, _) in align.iter().enumerate().filter(|(_, a)| **a == Right) {
        table
            .modify(Columns::one(column), Alignment::right())
            .modify((1, column), LineChar::horizontal(':', Offset::End(0)));
    }
    let mut text = table.to_string();
    if empty {
        let alignment_row_end = text
            .match_indices('\n')
            .nth(1)
            .map_or(text.len(), |(i, _)| i);
        text.truncate(alignment_row_end);
    }
    text.push_str("\n\n");
    text
}

/// A duration in ns, in the unit that suits it.
pub(crate) fn fmt_duration(ns: f64) -> String {
    match ns {
        x if !x.is_finite() => "-".into(),
        x if x < 1e3 => format!("{x:.0} ns"),
        x if x < 1e6 => format!("{:.1} µs", x / 1e3),
        x if x < 1e9 => format!("{:.1} ms", x / 1e6),
        x => format!("{:.2} s", x / 1e9),
    }
}

/// A ratio with two or three significant digits: "1.02x", "13.4x", "142x".
pub(crate) fn fmt_ratio(r: f64) -> String {
    match r {
        x if !x.is_finite() => "-".into(),
        x if x >= 100.0 => format!("{x:.0}x"),
        x if x >= 10.0 => format!("{x:.1}x"),
        x => format!("{x:.2}x"),
    }
}

/// A JSON object.
pub(crate) fn obj<K: Into<String>>(fields: impl IntoIterator<Item = (K, Json)>) -> Json {
    Json::Object(fields.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// A JSON string.
pub(crate) fn text(s: impl AsRef<str>) -> Json {
    Json::from(s.as_ref())
}

/// Median, min, max, count and every value of `s`.
pub(crate) fn samples_json(s: &Samples) -> Json {
    obj([
        ("median", Json::from(s.median())),
        ("min", Json::from(s.min())),
        ("max", Json::from(s.max())),
        ("runs", Json::from(s.len())),
        (
            "values",
            Json::Array(s.values().iter().map(|&v| Json::from(v)).collect()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::{Align::Left, *};

    #[test]
    fn formats_numbers_for_tables() {
        assert_eq!(fmt_ns(9.26), "9.3");
        assert_eq!(fmt_ns(9750.4), "9,750");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(fmt_ratio(1.0234), "1.02x");
        assert_eq!(fmt_ratio(13.44), "13.4x");
        assert_eq!(fmt_duration(2.7e9), "2.70 s");
        assert_eq!(fmt_duration(130e6), "130.0 ms");
    }

    #[test]
    fn markdown_tables_align_numbers_right() {
        let rows = vec![
            vec!["malloc+free".to_string(), "1,000,000".to_string()],
            vec!["x".to_string(), "9.3".to_string()],
        ];
        assert_eq!(
            markdown_table(&["operation", "ns"], &[Left, Right], rows),
            "| operation   |        ns |\n\
             |-------------|----------:|\n\
             | malloc+free | 1,000,000 |\n\
             | x           |       9.3 |\n\n"
        );
        assert_eq!(
            markdown_table(&["a", "b"], &[Right, Left], Vec::new()),
            "| a | b |\n|--:|---|\n\n"
        );
    }
}
