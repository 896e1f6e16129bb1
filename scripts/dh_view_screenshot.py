#!/usr/bin/env python3
"""Open a DHAT JSON file in valgrind's dh_view.html in headless Chromium, check that
the viewer loaded it without an error, and save a screenshot.

    scripts/dh_view_screenshot.py DHAT.json OUT.png [--dom OUT.html] [--expect TEXT]...

dh_view.html loads files only through an <input type=file> (this version has no
`?file=` parameter), and a page opened from file:// may not fetch other files. So the
script builds a page next to copies of dh_view.js and dh_view.css that embeds the
file's text as a JavaScript string, runs the viewer's own onLoad(), and hands the text
to the viewer's real file input as a File (DataTransfer), firing its change event: the
viewer then reads, parses and checks the file exactly as when a user picks it with
"Load...". Chromium runs with a virtual time budget, so the FileReader and the
rendering finish before the DOM is dumped and the screenshot taken.

It exits non-zero (saying why) if Chromium fails, if the viewer reports an error (a
missing field, a wrong version, a repeated location), or if an --expect text is not in
the rendered page. Needs valgrind (for dh_view.*: DH_VIEW_DIR, default where Debian
installs it) and chromium (CHROMIUM, default `chromium`).
"""
import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PAGE = """<!DOCTYPE html>
<html>
  <head>
    <meta charset="UTF-8">
    <link rel="stylesheet" href="dh_view.css">
    <script src="dh_view.js"></script>
    <script src="data.js"></script>
    <script>
      // The viewer's own setup, then the file through its real <input type=file>.
      function memtrackOpen() {
        onLoad();
        const file = new File([memtrackDhat.text], memtrackDhat.name,
                              {type: "application/json"});
        const transfer = new DataTransfer();
        transfer.items.add(file);
        gInput.files = transfer.files;
        gInput.dispatchEvent(new Event("change"));
      }
    </script>
  </head>
  <body onload="memtrackOpen()"></body>
</html>
"""


def find_dh_view():
    candidates = [os.environ.get("DH_VIEW_DIR"), "/usr/libexec/valgrind", "/usr/lib/valgrind"]
    for d in candidates:
        if d and os.path.isfile(os.path.join(d, "dh_view.html")):
            return d
    try:
        listing = subprocess.run(["dpkg", "-L", "valgrind"], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            if line.endswith("/dh_view.html"):
                return os.path.dirname(line)
    except OSError:
        pass
    sys.exit("dh_view.html not found: install valgrind or set DH_VIEW_DIR")


def chromium(args, page):
    command = [
        os.environ.get("CHROMIUM", "chromium"),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--virtual-time-budget=20000",
    ] + args + ["file://" + page]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"chromium failed ({done.returncode}): {' '.join(command)}\n{done.stderr}")
    return done.stdout


def page_text(dom):
    """The visible text of the dumped DOM (tags removed, entities decoded)."""
    body = re.sub(r"<script.*?</script>", "", dom, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dhat", help="the DHAT JSON file")
    parser.add_argument("png", help="where to save the screenshot")
    parser.add_argument("--dom", help="also save the rendered DOM here")
    parser.add_argument("--expect", action="append", default=[],
                        help="text the rendered page must contain (repeatable)")
    parser.add_argument("--size", default="1400,1600", help="window size WIDTH,HEIGHT")
    args = parser.parse_args()

    with open(args.dhat, encoding="utf-8") as f:
        text = f.read()
    viewer = find_dh_view()
    with tempfile.TemporaryDirectory(prefix="dh-view-") as work:
        for name in ("dh_view.js", "dh_view.css"):
            shutil.copy(os.path.join(viewer, name), work)
        with open(os.path.join(work, "data.js"), "w", encoding="utf-8") as f:
            name = os.path.basename(args.dhat)
            f.write(f"const memtrackDhat = {{name: {json.dumps(name)}, text: {json.dumps(text)}}};\n")
        page = os.path.join(work, "view.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(PAGE)

        dom = chromium(["--dump-dom"], page)
        if args.dom:
            with open(args.dom, "w", encoding="utf-8") as f:
                f.write(dom)
        errors = re.findall(r'<span class="error">(.*?)</span>', dom, flags=re.S)
        if errors:
            sys.exit(f"dh_view.html reported: {html.unescape(errors[0])}")
        shown = page_text(dom)
        for wanted in ["Invocation {", "PP 1/1"] + args.expect:
            if wanted not in shown:
                sys.exit(f"dh_view.html did not show {wanted!r}; it shows:\n{shown[:3000]}")
        chromium([f"--window-size={args.size}", f"--screenshot={os.path.abspath(args.png)}"], page)
    if not os.path.isfile(args.png) or os.path.getsize(args.png) == 0:
        sys.exit(f"chromium wrote no screenshot to {args.png}")
    print(f"dh_view.html opened {args.dhat}; screenshot in {args.png}")


if __name__ == "__main__":
    main()
