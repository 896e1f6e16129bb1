#!/usr/bin/env python3
"""Open a page of `memtrack report --html` or `memtrack diff --html` in headless
Chromium, check that it rendered without a console message and that its chart is drawn,
and save a screenshot.

    scripts/html_report_check.py PAGE.html OUT.png [--dom OUT.html] [--expect TEXT]...
                                 [--no-element TAG]... [--section ID] [--size W,H]

The page is opened from disk (file://) as a user would, the section shown picked by
its address (`#s0`, the biggest, unless --section). Chromium runs with a virtual time
budget, so the page's script (which draws the shown section's chart with plotly.js) has
run before the DOM is dumped and the screenshot taken, and with its logging on stderr,
where every message the page writes to its console (an exception, a blocked load, an
error of plotly.js or of a flamegraph's script) is a line with `CONSOLE`.

It exits non-zero (saying why) if Chromium fails, if the page wrote anything to its
console, if the shown section's chart has no plotly SVG, if an --expect text is not in
the page's text, or if the page has an element --no-element names (outside its
scripts: an element a hostile name would have added). Needs chromium (CHROMIUM,
default `chromium`). Prints when the page was ready (its `data-ready-ms`: its first
chart drawn, ms after it began loading) and how long the dump took (wall time).
"""
import argparse
import html
import os
import re
import subprocess
import sys
import time


def chromium(args, url):
    command = [
        os.environ.get("CHROMIUM", "chromium"),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",
    ] + args + [url]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"chromium failed ({done.returncode}): {' '.join(command)}\n{done.stderr}")
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    if console:
        sys.exit("the page wrote to its console:\n" + "\n".join(console))
    return done.stdout, elapsed


def without_scripts(dom):
    return re.sub(r"<script.*?</script>", "", dom, flags=re.S)


def page_text(dom):
    """The text of the dumped DOM (tags and scripts removed, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", without_scripts(dom)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", help="the HTML page")
    parser.add_argument("png", help="where to save the screenshot")
    parser.add_argument("--dom", help="also save the rendered DOM here")
    parser.add_argument("--expect", action="append", default=[],
                        help="text the page must contain (repeatable)")
    parser.add_argument("--no-element", action="append", default=[],
                        help="an element the page must not have (repeatable)")
    parser.add_argument("--section", default="s0", help="the section shown")
    parser.add_argument("--size", default="1400,1000", help="window size WIDTH,HEIGHT")
    args = parser.parse_args()

    url = "file://" + os.path.abspath(args.page) + "#" + args.section
    dom, elapsed = chromium(["--dump-dom"], url)
    if args.dom:
        with open(args.dom, "w", encoding="utf-8") as f:
            f.write(dom)
    chart = re.search(r'<div class="chart[^"]*" id="chart-' + re.escape(args.section)
                      + r'"[^>]*>(.*?)</section>', dom, flags=re.S)
    if not chart or 'class="main-svg"' not in chart.group(1):
        sys.exit(f"the chart of section {args.section} was not drawn (no plotly SVG in it)")
    shown = page_text(dom)
    for wanted in args.expect:
        if wanted not in shown:
            sys.exit(f"the page does not show {wanted!r}; it shows:\n{shown[:3000]}")
    markup = without_scripts(dom)
    for tag in args.no_element:
        if re.search(r"<" + re.escape(tag) + r"[\s/>]", markup, flags=re.I):
            sys.exit(f"the page has a <{tag}> element")
    _, _ = chromium([f"--window-size={args.size}",
                     f"--screenshot={os.path.abspath(args.png)}"], url)
    if not os.path.isfile(args.png) or os.path.getsize(args.png) == 0:
        sys.exit(f"chromium wrote no screenshot to {args.png}")
    ready = re.search(r'data-ready-ms="(\d+)"', dom)
    ready = f"{ready.group(1)} ms" if ready else "unknown"
    print(f"{args.page}: {os.path.getsize(args.page)} bytes, ready {ready} after it began "
          f"loading (chromium's dump-dom took {elapsed:.2f} s); screenshot in {args.png}")


if __name__ == "__main__":
    main()
