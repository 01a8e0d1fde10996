// The calculator of book/calculator.md: a form, and what helpers.cost.web.calculate answers.
//
// The numbers are the book's Python's: Pyodide (../pyodide/, fetched by `make venv`) runs boot.py,
// which imports helpers.cost.web from helpers.zip (written at each book build from the sources by
// helpers/chapters/calculator.py). This file computes nothing: it sends the settings as JSON, and
// prints the texts the answer carries; its numbers only size the bars. The settings live in the
// address's hash (#layers=32&hidden=4096&...), so a link shows the same configuration.
// window.calculator exposes the state for tests/test_calculator.py.
"use strict";

(function () {
  const root = document.getElementById("calculator");
  if (!root) return;
  const BASE = new URL(".", document.currentScript.src).href;
  const PYODIDE = new URL("../pyodide/", BASE).href;
  const api = { ready: false, busy: false, results: 0, state: null, last: null, timings: {} };
  window.calculator = api;
  const t0 = performance.now();

  const FIELDS = [
    ["Model", [
      ["preset", "preset", "select"],
      ["style", "style", "select", [["llama", "Llama-style"], ["gpt", "GPT-style"]]],
      ["layers", "layers L", "int"], ["hidden", "hidden h", "int"], ["heads", "heads", "int"],
      ["kv_heads", "KV heads", "int"], ["ffn", "MLP width f", "int"], ["vocab", "vocabulary", "int"],
      ["seq", "sequence s", "int"],
    ]],
    ["Cluster", [
      ["hw", "GPUs and links", "select"],
      ["G", "GPUs G", "int"], ["node", "GPUs per node", "int"], ["mem", "GiB per GPU", "num"],
      ["eff", "compute efficiency", "num"], ["flash", "flash attention", "check"],
    ]],
    ["Layout", [
      ["T", "tensor T", "int"], ["P", "pipeline P", "int"],
      ["sp", "sequence mode", "select", [["none", "none"], ["split_gather", "split_gather (S = T)"], ["all_to_all", "all_to_all (own axis)"]]],
      ["S", "sequence S (all_to_all)", "int"], ["v", "chunks c (interleaved)", "int"],
      ["zero", "ZeRO stage", "select", [["0", "0 (DDP)"], ["1", "1"], ["2", "2"], ["3", "3 (FSDP)"]]],
      ["fsdp", "ZeRO-3 form", "select", [["reshard", "FSDP, reshard"], ["keep", "FSDP, kept"], ["hsdp", "HSDP"]]],
      ["shard", "HSDP shard group", "int"],
      ["b", "micro-batch b", "int"], ["B", "global batch B (sequences)", "int"],
      ["m", "accumulation m", "int"],
      ["rc", "recomputation", "select", [["none", "none"], ["selective", "selective"], ["full", "full"]]],
      ["pr", "precision", "select", [["bf16", "bf16 mixed"], ["fp16", "fp16 mixed"], ["fp32", "fp32"]]],
    ]],
  ];
  const MEMORY_COLORS = ["#4e79a7", "#76b7b2", "#59a14f", "#edc948", "#f28e2b", "#e15759", "#b07aa1", "#9c9c9c"];
  const STEP_COLORS = ["#4e79a7", "#f28e2b", "#edc948", "#b07aa1", "#bab0ac", "#e15759"];
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const kid of kids) e.append(kid);
    return e;
  };
  const svg = (tag, attrs) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  };
  const text = (key, value) => el("span", { "data-key": key }, String(value));

  function status(message, kind) {
    let p = root.querySelector(".calc-status");
    if (!p) root.prepend((p = el("p", { class: "calc-status" })));
    p.dataset.state = kind;
    p.textContent = message;
  }

  if (location.protocol === "file:") {
    status(
      "This calculator runs the book's Python in your browser, and browsers load it only from a " +
        "web server, not from a file. In the book's folder run `make serve` and open " +
        "http://localhost:8000/book/calculator.html",
      "file",
    );
    return;
  }

  // ---- settings <-> address ---------------------------------------------------------------
  function fromHash() {
    const out = {};
    for (const [k, v] of new URLSearchParams(location.hash.slice(1))) out[k] = v;
    return out;
  }
  function toHash(state) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(state)) if (k !== "m") q.set(k, v);
    history.replaceState(null, "", "#" + q.toString());
  }

  // ---- the form ---------------------------------------------------------------------------
  let data, pyCalculate;
  const inputs = {};

  function buildForm() {
    const form = el("form", { class: "calc-form", autocomplete: "off" });
    form.addEventListener("submit", (e) => e.preventDefault());
    for (const [legend, fields] of FIELDS) {
      const set = el("fieldset", {}, el("legend", {}, legend));
      for (const [key, label, kind, options] of fields) {
        let input;
        if (kind === "select") {
          input = el("select", {});
          let opts = options;
          if (key === "preset") {
            opts = [["", "(as set below)"]].concat(data.presets.map((p) => [p.key, p.label]));
          } else if (key === "hw") {
            opts = Object.entries(data.hardware).map(([k, h]) => [k, h.label]);
          }
          for (const [value, shown] of opts) input.append(el("option", { value }, shown));
        } else if (kind === "check") {
          input = el("input", { type: "checkbox" });
        } else {
          input = el("input", { type: "number", min: "0", step: kind === "int" ? "1" : "any" });
        }
        input.id = "calc-" + key;
        input.name = key;
        input.addEventListener("change", () => edited(key));
        inputs[key] = input;
        set.append(el("label", { for: input.id }, el("span", {}, label), input));
      }
      form.append(set);
    }
    return form;
  }

  function showState(state) {
    for (const [key, input] of Object.entries(inputs)) {
      if (input.type === "checkbox") input.checked = String(state[key]) !== "0";
      else input.value = state[key] === undefined ? "" : state[key];
    }
  }

  function edited(key) {
    const input = inputs[key];
    const state = api.state;
    if (key === "preset") {
      const preset = data.presets.find((p) => p.key === input.value);
      if (preset) Object.assign(state, preset.settings); // a model's: the rest stays
      state.preset = input.value;
    } else if (key === "hw") {
      const h = data.hardware[input.value];
      Object.assign(state, { hw: input.value, node: h.node, mem: h.mem, eff: h.eff });
    } else if (input.type === "checkbox") {
      state[key] = input.checked ? 1 : 0;
    } else {
      state[key] = input.value;
      if (FIELDS[0][1].some((f) => f[0] === key)) Object.assign(state, { preset: "", name: "" });
    }
    if (key !== "m") delete state.m;
    showState(state);
    schedule();
  }

  // ---- running the Python -----------------------------------------------------------------
  let timer = null;
  function schedule() {
    clearTimeout(timer);
    api.busy = true;
    timer = setTimeout(run, 50);
  }

  function run() {
    const state = api.state;
    let result;
    try {
      result = JSON.parse(pyCalculate(JSON.stringify(state)));
    } catch (err) {
      result = { error: String(err) };
    }
    if (!result.error) {
      for (const [k, v] of Object.entries(result.settings)) if (k !== "m") state[k] = v;
      state.B = result.layout.B;
      delete state.m;
      showState(state);
    }
    toHash(state);
    render(result);
    if (!api.timings.first) api.timings.first = performance.now() - t0;
    api.last = result;
    api.results += 1;
    api.busy = false;
  }

  // ---- output -----------------------------------------------------------------------------
  const out = el("div", { class: "calc-out", "aria-live": "polite" });

  function bar(parts, scale, colors, capacity, label) {
    const W = 800, H = 34;
    const s = svg("svg", { viewBox: `0 0 ${W} ${H + 18}`, class: "calc-bar", role: "img" });
    let x = 0;
    parts.forEach((p, i) => {
      const w = (p.value / scale) * W;
      if (w > 0) {
        const r = svg("rect", { x, y: 0, width: w, height: H, fill: colors[i % colors.length] });
        r.append(svg("title", {}));
        r.firstChild.textContent = `${p.name}: ${p.text}`;
        s.append(r);
      }
      x += w;
    });
    if (capacity !== undefined) {
      const cx = (capacity / scale) * W;
      s.append(svg("line", { x1: cx, x2: cx, y1: 0, y2: H + 4, class: "calc-capacity" }));
      const t = svg("text", { x: cx, y: H + 16, "text-anchor": cx > W / 2 ? "end" : "start" });
      t.textContent = label;
      s.append(t);
    }
    return s;
  }

  function legendTable(head, rows, kind) {
    const t = el("table", { class: `calc-table calc-${kind}` });
    t.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))));
    const body = el("tbody");
    for (const r of rows) body.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
    t.append(body);
    return t;
  }

  const swatch = (color) => el("span", { class: "calc-swatch", style: `background:${color}` });

  function render(r) {
    out.replaceChildren();
    inputs.m.value = r.error ? "" : r.layout.m;
    if (r.error) {
      out.append(el("p", { class: "calc-error", "data-key": "error" }, r.error));
      return;
    }
    const L = r.layout;
    out.append(
      el("p", { class: "calc-summary" },
        text("model.name", r.model.name), " (", text("model.params_text", r.model.params_text),
        " parameters): ", text("layout.text", L.text), ", ", text("layout.sharding", L.sharding),
        "; D = ", text("layout.D", L.D), ", accumulation m = ", text("layout.m", L.m),
        ", global batch ", text("layout.B", L.B), " sequences, ",
        text("layout.tokens", L.tokens), " tokens a step."),
    );
    if (L.violations.length) {
      const ul = el("ul", {});
      L.violations.forEach((v, i) => ul.append(el("li", {}, text(`layout.violations.${i}`, v))));
      out.append(el("div", { class: "calc-warn" },
        el("p", {}, "Colossal-AI would refuse this layout (the numbers below are the models' anyway):"), ul));
    }
    // memory
    const M = r.memory;
    const mparts = M.parts.map((p) => ({ name: p.name, value: p.bytes, text: p.text }));
    const mscale = Math.max(M.capacity, M.total) * 1.02;
    out.append(el("h3", {}, "Memory of the busiest GPU"));
    out.append(el("p", {},
      text("memory.total_text", M.total_text), " GiB of ", text("memory.capacity_text", M.capacity_text),
      " GiB: ", el("strong", { "data-key": "memory.fits" }, M.fits ? "fits" : "does not fit"),
      " (pipeline stage ", text("memory.stage", M.stage), ", peak in the ", text("memory.phase", M.phase),
      " phase)."));
    out.append(bar(mparts, mscale, MEMORY_COLORS, M.capacity, `GPU memory, ${M.capacity_text} GiB`));
    out.append(legendTable(["", "part", "GiB"], M.parts.map((p, i) => [
      swatch(MEMORY_COLORS[i % MEMORY_COLORS.length]), p.name, text(`memory.parts.${i}.text`, p.text)]), "memory"));
    // step
    const S = r.step;
    out.append(el("h3", {}, "Step time"));
    out.append(el("p", {},
      text("step.step_text", S.step_text), " s a step, ", text("step.tokens_per_s_text", S.tokens_per_s_text),
      " tokens/s (", text("step.tokens_per_gpu_text", S.tokens_per_gpu_text), " per GPU), MFU ",
      text("step.mfu_text", S.mfu_text), " %."));
    out.append(bar(S.parts.map((p) => ({ name: p.name, value: p.s, text: p.text })), S.step_s, STEP_COLORS));
    out.append(legendTable(["", "part", "s", "%", "link"], S.parts.map((p, i) => [
      swatch(STEP_COLORS[i]), p.name, text(`step.parts.${i}.text`, p.text),
      text(`step.parts.${i}.share_text`, p.share_text), text(`step.parts.${i}.link`, p.link)]), "step"));
    // planner
    const R = r.planner;
    out.append(el("h3", {}, "The planner's ranking"));
    out.append(el("p", {},
      text("planner.count", R.count), " layouts of this model on ", text("settings.G", r.settings.G),
      " GPUs with this global batch, ", text("planner.fit", R.fit), " fit; ",
      R.rank > 0 ? el("span", {}, "this layout ranks ", text("planner.rank", R.rank), ".")
        : el("span", {}, "this layout is not among them: ", text("planner.absent", R.absent), "."),
    ));
    if (R.rows.length) {
      const cols = Object.keys(R.rows[0]);
      out.append(el("div", { class: "calc-scroll" }, legendTable(["#", ...cols], R.cells.map((row, i) => [
        String(i + 1), ...row.map((cell, j) => text(`planner.cells.${i}.${j}`, cell))]), "planner")));
    }
  }

  // ---- start ------------------------------------------------------------------------------
  async function start() {
    status("Loading Python (Pyodide) and the book's helpers.cost …", "loading");
    const get = (name) => fetch(BASE + name, { cache: "no-cache" }).then((r) => {
      if (!r.ok) throw new Error(`${name}: HTTP ${r.status}`);
      return r;
    });
    const [{ loadPyodide }, page, zip, boot] = await Promise.all([
      import(PYODIDE + "pyodide.mjs"),
      get("calculator.json").then((r) => r.json()),
      get("helpers.zip").then((r) => r.arrayBuffer()),
      get("boot.py").then((r) => r.text()),
    ]);
    data = page;
    const py = await loadPyodide({ indexURL: PYODIDE });
    api.timings.pyodide = performance.now() - t0;
    py.FS.mkdirTree("/calculator");
    py.FS.writeFile("/calculator/helpers.zip", new Uint8Array(zip));
    py.runPython(boot);
    const [calc] = py.globals.get("start")("/calculator/helpers.zip").toJs();
    pyCalculate = calc;
    const form = buildForm();
    const hash = fromHash();
    let state;
    if (Object.keys(hash).length) {
      state = hash;
    } else {
      const preset = data.presets.find((p) => p.key === data.default);
      state = Object.assign({}, data.defaults, preset.settings, { preset: preset.key });
    }
    api.state = state;
    showState(state);
    root.querySelector(".calc-status").remove();
    root.append(form, out);
    run();
    api.ready = true;
  }

  start().catch((err) => {
    status("The calculator could not start: " + err, "error");
    api.error = String(err);
  });
})();
