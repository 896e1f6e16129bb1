//! The page around the sections: head (style, Content-Security-Policy), the list to
//! pick a scope from, the sections, the charts' data and the script that shows one
//! section at a time and draws its chart with plotly.js (inline).

use std::fmt::Write as _;

use super::escape;

/// The page's policy: nothing is loaded from anywhere; inline scripts and styles run,
/// images and the flamegraphs' frames come from `data:` URLs inside the page.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; frame-src data:; font-src data:";

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 8px 16px; background: #f3f3f3; border-bottom: 1px solid #ddd; }
header h1 { font-size: 18px; margin: 4px 0; }
.note { color: #8a5a00; }
#layout { display: flex; align-items: flex-start; }
nav { width: 40%; max-height: calc(100vh - 90px); overflow: auto; position: sticky;
      top: 0; border-right: 1px solid #ddd; }
main { flex: 1; padding: 0 16px 16px; min-width: 0; }
table { border-collapse: collapse; }
td, th { padding: 2px 6px; text-align: left; vertical-align: top; }
#scopes { width: 100%; font-size: 12px; }
#scopes td.n, #scopes th.n { text-align: right; white-space: nowrap; }
#scopes tr[data-scope] { cursor: pointer; }
#scopes tr.current { background: #dbe9f7; }
#scopes tr:hover { background: #eef4fb; }
#scopes a { color: inherit; text-decoration: none; }
.spark { font-family: monospace; white-space: pre; color: #1f77b4; font-size: 9px; }
.cmd { overflow-wrap: anywhere; }
section h2 { font-size: 16px; word-break: break-all; }
table.counters th { font-weight: normal; color: #555; white-space: nowrap; }
table.counters td { font-family: monospace; }
table.stacks td.n { text-align: right; white-space: nowrap; }
table.stacks { font-size: 12px; margin-bottom: 12px; }
table.stacks tr { border-top: 1px solid #eee; }
.frames { font-family: monospace; word-break: break-all; }
iframe.flame { width: 100%; height: 520px; border: 1px solid #ddd; }
.up { color: #b00; } .down { color: #070; }
"#;

/// Shows the section the list (or the address's `#s3`) picks, and draws its chart the
/// first time (a chart drawn while hidden would have no size); a flamegraph's frame
/// gets its `src` when its section is shown and its `<details>` open.
const SCRIPT: &str = r##"
(function () {
  "use strict";
  var charts = JSON.parse(document.getElementById("memtrack-charts").textContent);
  var drawn = {};
  // A flamegraph's frame loads when it can be seen (its script sizes it to its frame).
  function loadFrames(root) {
    var frames = root.querySelectorAll("details[open] > iframe[data-src]");
    for (var i = 0; i < frames.length; i++) {
      var section = frames[i].closest("section.scope");
      if (section && !section.hidden) {
        frames[i].src = frames[i].getAttribute("data-src");
        frames[i].removeAttribute("data-src");
      }
    }
  }
  document.addEventListener("toggle", function (event) {
    if (event.target.tagName === "DETAILS") { loadFrames(event.target); }
  }, true);
  // A section's id is "scope-" and its key (`s3`); the address names the key alone, so
  // that showing a section does not scroll the page to it.
  function show(id) {
    var sections = document.querySelectorAll("section.scope");
    var found = false;
    for (var i = 0; i < sections.length; i++) {
      var on = sections[i].id === "scope-" + id;
      sections[i].hidden = !on;
      found = found || on;
    }
    var rows = document.querySelectorAll("#scopes tr[data-scope]");
    for (var j = 0; j < rows.length; j++) {
      rows[j].classList.toggle("current", rows[j].getAttribute("data-scope") === id);
    }
    if (found) { loadFrames(document.getElementById("scope-" + id)); }
    if (found && charts[id] && !drawn[id]) {
      drawn[id] = true;
      var figure = charts[id];
      Plotly.newPlot("chart-" + id, figure.data, figure.layout,
                     {responsive: true, displaylogo: false});
    }
    return found;
  }
  document.getElementById("scopes").addEventListener("click", function (event) {
    var row = event.target.closest("tr[data-scope]");
    if (row) { location.hash = row.getAttribute("data-scope"); }
  });
  window.addEventListener("hashchange", function () { show(location.hash.slice(1)); });
  var first = document.querySelector("section.scope");
  if (!show(location.hash.slice(1)) && first) { show(first.id.slice("scope-".length)); }
  // When the page was ready, ms after it began loading (for measuring it).
  document.documentElement.setAttribute("data-ready-ms", String(Math.round(performance.now())));
})();
"##;

/// plotly.js, as the `plotly` crate ships it (minified, MIT licensed): the first
/// script of its offline sources (the second is MathJax, which the charts do not use).
pub fn plotly_js() -> String {
    let sources = plotly::Plot::offline_js_sources();
    let start = sources.find('>').map_or(0, |i| i + 1);
    let end = sources[start..]
        .find("</script>")
        .map_or(sources.len(), |i| start + i);
    sources[start..end].to_string()
}

/// The parts of a page.
pub struct Page {
    /// The `<title>` and heading (unescaped).
    pub title: String,
    /// HTML below the heading: what the page shows and leaves out.
    pub header: String,
    /// The list's table rows (HTML), under `head` (HTML `<th>`s).
    pub list_head: String,
    /// The rows.
    pub list_rows: String,
    /// The sections (HTML).
    pub sections: String,
    /// The charts, by section id, each a plotly figure's JSON (`{"data", "layout"}`).
    pub charts: Vec<(String, String)>,
}

impl Page {
    /// The whole page.
    pub fn render(&self) -> String {
        let mut charts = String::from("{");
        for (i, (id, figure)) in self.charts.iter().enumerate() {
            if i != 0 {
                charts.push(',');
            }
            // Ids are made by the page (`s12`), never from the results.
            let _ = write!(charts, "\"{id}\":{figure}");
        }
        charts.push('}');
        let title = escape::text(&self.title);
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY}\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
             <header><h1>{title}</h1>\n{header}</header>\n<div id=\"layout\">\n\
             <nav><table id=\"scopes\"><thead><tr>{head}</tr></thead><tbody>\n{rows}\
             </tbody></table></nav>\n<main>\n{sections}</main>\n</div>\n\
             <script>{plotly}</script>\n\
             <script type=\"application/json\" id=\"memtrack-charts\">{data}</script>\n\
             <script>{SCRIPT}</script>\n</body>\n</html>\n",
            header = self.header,
            head = self.list_head,
            rows = self.list_rows,
            sections = self.sections,
            plotly = plotly_js(),
            data = escape::script_json(&charts),
        )
    }
}

/// A table of label/value rows (both escaped here).
pub fn rows_table(class: &str, rows: &[[String; 2]]) -> String {
    let mut out = format!("<table class=\"{class}\">");
    for [label, value] in rows {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape::text(label),
            escape::text(value)
        );
    }
    out.push_str("</table>\n");
    out
}

/// The opening tag of section `id` (`s3`), hidden until the script shows it.
pub fn section_open(id: &str) -> String {
    format!("<section class=\"scope\" id=\"scope-{id}\" hidden>\n")
}

/// The chart's empty `<div>` of section `id`, which the script fills.
pub fn chart_div(id: &str) -> String {
    format!("<div class=\"chart\" id=\"chart-{id}\"></div>\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plotly_js_is_the_library_alone_and_cannot_end_its_script() {
        let js = plotly_js();
        assert!(
            js.trim_start().starts_with("/**\n* plotly.js v3."),
            "{}",
            &js[..80]
        );
        assert!(!js.contains("</script") && !js.contains("<!--"));
        // Large, but bounded: the page's fixed cost.
        assert!((4_000_000..6_000_000).contains(&js.len()), "{}", js.len());
    }

    #[test]
    fn the_page_loads_nothing_and_holds_its_parts() {
        let page = Page {
            title: "memtrack </title><script>".into(),
            header: String::new(),
            list_head: String::new(),
            list_rows: String::new(),
            sections: chart_div("s0"),
            charts: vec![("s0".into(), r#"{"data":[{"name":"</script>"}]}"#.into())],
        }
        .render();
        assert!(page.contains("<title>memtrack &lt;/title&gt;&lt;script&gt;</title>"));
        assert!(page.contains(r#"{"s0":{"data":[{"name":"\u003c/script\u003e"}]}}"#));
        // Nothing from elsewhere: no URL is loaded by the page (plotly.js names some in
        // its code, for links it makes on request).
        let own = page.replace(&plotly_js(), "");
        for load in ["src=\"http", "href=\"http", "src=\"//", "@import", "url("] {
            assert!(!own.contains(load), "{load}");
        }
        assert_eq!(own.matches("<script").count(), 3);
    }
}
