//! What makes a string from the results safe in the page: every command line, benchmark
//! uri, directory and function name is the user's (or a traced program's), so none may
//! end an element, open a tag or a script, or leave an attribute.

/// `text` for HTML text or a quoted attribute value: `&`, `<`, `>`, `"` and `'` as
/// character references.
pub fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `json` (serde_json's text of a value) made safe inside a `<script>` element: `<`,
/// `>` and `&` (which appear only inside JSON strings) and the line separators U+2028
/// and U+2029 as `\u` escapes, so no `</script>` or `<!--` can appear and the text is
/// the same value to `JSON.parse`.
pub fn script_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_of_a_hostile_name_survives_as_markup() {
        let name = r#"</script><img src=x onerror="alert('x')">&amp;"#;
        let escaped = text(name);
        assert_eq!(
            escaped,
            "&lt;/script&gt;&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;&amp;amp;"
        );
        for bad in ['<', '>', '"', '\''] {
            assert!(!escaped.contains(bad), "{escaped}");
        }
    }

    #[test]
    fn json_in_a_script_reads_back_the_same_and_cannot_close_it() {
        let value = serde_json::json!({"uri": "</script><!-- \u{2028} & \"q\" 'a'"});
        let safe = script_json(&serde_json::to_string(&value).unwrap());
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        assert!(!safe.contains('\u{2028}'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
