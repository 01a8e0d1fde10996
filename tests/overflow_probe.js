// Finds the blocks of a rendered page that scroll sideways (tests/page_overflow.py).
//
// overflowReport(doc) returns {blocks, viewport, overflowing: [{kind, text, scroll, client}]}:
// every code block, output (in a notebook or glued on a chapter page), table and display
// equation of the article is a block; one overflows when its scrollWidth exceeds its clientWidth
// by more than 1 px (rounding). Only the innermost overflowing block of a nest is reported (a
// wide <pre> inside an output is the <pre>). The page itself is one more block: it overflows
// when the document scrolls sideways, and its entry names the elements that stick out.
"use strict";

const BLOCKS = [
  "pre",
  "table",
  ".pst-scrollable-table-container",
  "div.output",
  "mjx-container[display='true']",
].join(", ");

function blockKind(el) {
  if (el.matches("mjx-container")) return "math";
  if (el.matches("table, .pst-scrollable-table-container") || el.querySelector("table")) {
    return "table";
  }
  if (el.closest(".cell_output, .output")) return "output";
  return "code";
}

function firstChars(el) {
  return (el.textContent || "").replace(/\s+/g, " ").trim().slice(0, 60);
}

function overflows(el) {
  return el.scrollWidth > el.clientWidth + 1;
}

function overflowReport(doc) {
  const article = doc.querySelector(".bd-article") || doc.body;
  const blocks = Array.from(article.querySelectorAll(BLOCKS));
  const wide = blocks.filter(overflows);
  const innermost = wide.filter((el) => !wide.some((o) => o !== el && el.contains(o)));
  const report = innermost.map((el) => ({
    kind: blockKind(el),
    text: firstChars(el),
    scroll: el.scrollWidth,
    client: el.clientWidth,
  }));
  const root = doc.documentElement;
  if (overflows(root)) {
    // Name what sticks out: the deepest article elements whose right edge passes the window,
    // leaving out what a block that scrolls (or clips) on its own keeps inside it.
    const edge = root.clientWidth + 1;
    const win = doc.defaultView;
    const out = [];
    const visit = (el) => {
      const inside = el.getBoundingClientRect().right <= edge;
      if (!inside) out.push(el);
      if (inside && win.getComputedStyle(el).overflowX !== "visible") return;
      Array.from(el.children).forEach(visit);
    };
    Array.from(article.children).forEach(visit);
    const deepest = out.filter((el) => !out.some((o) => o !== el && el.contains(o)));
    report.push({
      kind: "page",
      text: deepest.slice(0, 3).map((el) => `<${el.tagName.toLowerCase()}> ${firstChars(el)}`)
        .join(" | "),
      scroll: root.scrollWidth,
      client: root.clientWidth,
    });
  }
  return { blocks: blocks.length + 1, viewport: root.clientWidth, overflowing: report };
}
