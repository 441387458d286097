// The page troupe-report writes: a header with the run's name, its key figures, then a grid of
// charts the script builds from the embedded data (only those the data has columns for), the trace's
// timeline and critical path last. A Content-Security-Policy forbids any fetch, so the page works
// offline and proves it does. When every chart has drawn, the script writes "N charts drawn" into
// #status and sets data-charts on <body> (and data-rendered on each canvas): the browser test reads them.
#include "report_page.hpp"

#include <string_view>

#include "chartjs.hpp"

namespace troupe::apps {

namespace {

constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@ · troupe-report</title>
<style>
  :root { --ink: #1f2933; --muted: #52606d; --line: #d9e2ec; --page: #f0f4f8; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); background: var(--page); }
  header { padding: 1.4rem 2rem 1.1rem; background: #102a43; color: #fff; }
  header h1 { margin: 0 0 .25rem; font-size: 1.6rem; font-weight: 600; }
  header p { margin: 0; color: #bcccdc; font-size: .85rem; overflow-wrap: anywhere; }
  main { padding: 1.4rem 2rem 2rem; }
  .figures { display: flex; flex-wrap: wrap; gap: .75rem; margin-bottom: 1.4rem; }
  .figure { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: .55rem 1rem; min-width: 10rem; }
  .figure b { display: block; font-size: 1.3rem; font-weight: 600; }
  .figure span { color: var(--muted); font-size: .8rem; }
  .grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(28rem, 1fr)); gap: 1.2rem; }
  .card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: .9rem 1.2rem 1rem; min-width: 0; }
  .card.wide { grid-column: 1 / -1; }
  .card h2 { margin: 0 0 .15rem; font-size: 1.05rem; }
  .card p.note { margin: 0 0 .6rem; color: var(--muted); font-size: .82rem; }
  .chart { position: relative; height: 17rem; }
  ol.path { margin: .4rem 0 0; padding-left: 3rem; max-height: 24rem; overflow: auto; font-size: .82rem; }
  ol.path .time { color: var(--muted); }
  #status { margin-top: 1.4rem; color: var(--muted); font-size: .8rem; }
</style>
</head>
<body>
<header><h1>@TITLE@</h1><p id="sources"></p></header>
<main>
<div class="figures" id="figures"></div>
<div class="grid" id="charts"></div>
<p id="status">drawing the charts…</p>
</main>
<script>@CHARTJS@</script>
<script id="run-data" type="application/json">@DATA@</script>
<script>
"use strict";
const statusLine = document.getElementById("status");
window.addEventListener("error", e => {
  statusLine.textContent = "error: " + e.message;
  document.body.dataset.error = e.message;
});
const run = JSON.parse(document.getElementById("run-data").textContent);
const m = run.metrics;
const colors = {
  train: "#2563eb", val: "#ea580c", lr: "#7c3aed", norm: "#0891b2", variance: "#db2777", compute: "#16a34a",
  exposed: "#dc2626", comm: "#6b7280", peak: "#d97706", current: "#2563eb", scale: "#4d7c0f", busy: "#94a3b8",
  critical: "#ea580c", extra: ["#0d9488", "#9333ea", "#c026d3"],
};

// Every chart marks its canvas once drawn; the last one writes the status the browser test reads.
const specs = [];
let drawn = 0;
Chart.register({
  id: "troupeDrawn",
  afterRender(chart) {
    if (chart.canvas.dataset.rendered) return;
    chart.canvas.dataset.rendered = "true";
    if (++drawn === specs.length) {
      statusLine.textContent = drawn + " charts drawn";
      document.body.dataset.charts = String(drawn);
    }
  },
});
Chart.defaults.animation = false;
Chart.defaults.maintainAspectRatio = false;
Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
Chart.defaults.plugins.legend.labels.boxWidth = 12;

const fmt = (v, digits = 4) => Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : Number(v.toPrecision(digits)).toString();
const mib = bytes => bytes / (1 << 20);
const column = name => m.columns[name];
// The points of a column where it has a value (and `keep` holds), as {x: step, y}.
function series(name, f = v => v, keep = () => true) {
  const values = column(name) || [], out = [];
  values.forEach((v, i) => {
    if (v === null) return;
    const y = f(v, i);
    if (Number.isFinite(y) && keep(y, i)) out.push({x: m.steps[i], y});
  });
  return out;
}
const anyPositive = name => (column(name) || []).some(v => v > 0);
const axis = (text, extra = {}) => Object.assign({title: {display: true, text}}, extra);
const stepAxis = axis("step", {type: "linear", ticks: {precision: 0}});
const line = (label, data, color, extra = {}) => Object.assign(
    {label, data, borderColor: color, backgroundColor: color, borderWidth: 1.6, pointRadius: data.length > 60 ? 0 : 2}, extra);
// A line chart over steps; many steps are thinned by Chart.js's LTTB decimation.
const lineConfig = (datasets, scales, extra = {}) => ({
  type: "line",
  data: {datasets},
  options: Object.assign({
    parsing: false, normalized: true,
    interaction: {mode: "nearest", axis: "x", intersect: false},
    plugins: {decimation: {enabled: true, algorithm: "lttb", samples: 800}},
    scales: Object.assign({x: stepAxis}, scales),
  }, extra),
});
const chart = (id, title, note, config, options = {}) => specs.push(Object.assign({id, title, note, config}, options));

// The figures at the top.
const figures = [];
const figure = (value, label) => figures.push([value, label]);
if (m.steps.length) figure(m.steps.length === 1 ? String(m.steps[0]) : m.steps[0] + "–" + m.steps[m.steps.length - 1], "steps");
const lastLosses = series("loss").slice(-10);
if (lastLosses.length) figure(fmt(lastLosses.reduce((a, p) => a + p.y, 0) / lastLosses.length), "train loss (mean of the last " + lastLosses.length + " steps)");
const evalNames = m.names.filter(n => n.startsWith("val_"));
const evalTitle = name => ({val_loss: "validation loss", val_psnr: "validation PSNR (dB)"})[name] || name.replace(/^val_/, "validation ");
for (const name of evalNames) {
  const s = series(name);
  if (s.length) figure(fmt(s[s.length - 1].y), evalTitle(name) + " at step " + s[s.length - 1].x);
}
const stepTimes = series("step_ms");
const warm = stepTimes.length > 1 ? stepTimes.slice(1) : stepTimes;
const meanStep = warm.reduce((a, p) => a + p.y, 0) / Math.max(1, warm.length);
if (warm.length) figure(fmt(meanStep, 3) + " ms", "per step (mean" + (stepTimes.length > 1 ? ", the first left out)" : ")"));
if (anyPositive("comm_ms")) {
  const exposed = series("exposed_comm_ms").slice(stepTimes.length > 1 ? 1 : 0);
  figure((100 * exposed.reduce((a, p) => a + p.y, 0) / Math.max(1e-9, meanStep * exposed.length)).toFixed(1) + " %", "of a step waits for communication");
}
if (column("peak_bytes")) figure(fmt(mib(Math.max(...series("peak_bytes").map(p => p.y))), 4) + " MiB", "peak allocator memory");
const skipped = series("skipped", v => v, y => y > 0).length;
if (skipped) figure(String(skipped), "steps skipped by loss scaling");

// Losses: training and, on its evaluation steps, validation.
if (column("loss")) {
  const datasets = [line("train loss", series("loss"), colors.train)];
  if (column("val_loss")) datasets.push(line("validation loss", series("val_loss"), colors.val, {pointRadius: 3, borderWidth: 2}));
  chart("loss", "Loss", "the training loss of each step" + (column("val_loss") ? "; the validation loss where it was evaluated" : ""),
        lineConfig(datasets, {y: axis("loss")}));
}
// Other evaluations (troupe-sr's PSNR), in their own units.
evalNames.filter(n => n !== "val_loss").forEach((name, k) => {
  chart(name, evalTitle(name)[0].toUpperCase() + evalTitle(name).slice(1), "on the held-out data, where it was evaluated",
        lineConfig([line(evalTitle(name), series(name), colors.extra[k % colors.extra.length], {pointRadius: 3})], {y: axis(evalTitle(name))}));
});
if (anyPositive("lr"))
  chart("lr", "Learning rate", "the rate each step's update used",
        lineConfig([line("learning rate", series("lr"), colors.lr)],
                   {y: axis("learning rate", {beginAtZero: true, ticks: {callback: v => fmt(v, 3)}})}));
if (column("grad_norm")) {
  const datasets = [line("gradient norm", series("grad_norm"), colors.norm, {yAxisID: "y"})];
  const scales = {y: axis("global L2 norm", {position: "left"})};
  if (anyPositive("grad_variance")) {
    datasets.push(line("gradient variance", series("grad_variance", v => v, y => y > 0), colors.variance, {yAxisID: "y2"}));
    scales.y2 = axis("variance (log)", {type: "logarithmic", position: "right", grid: {drawOnChartArea: false}, ticks: {callback: v => fmt(v, 2)}});
  }
  chart("gradients", "Gradient norm and variance", "before clipping: the global norm (left) and the variance of all gradient elements (right)",
        lineConfig(datasets, scales));
}
// Step time, stacked: compute below, the communication no compute hid above; means over bins when
// there are many steps (stacked series need the same steps, which decimation would not keep).
if (stepTimes.length) {
  // A first step far slower than the rest (compiling, warming up) would flatten them.
  let first = 0, note = "";
  const rest = stepTimes.slice(1).map(p => p.y).sort((a, b) => a - b);
  if (stepTimes.length > 2 && stepTimes[0].y > 3 * rest[rest.length >> 1]) {
    first = 1;
    note = "; the first step (" + fmt(stepTimes[0].y, 3) + " ms, compiling and warming up) left out";
  }
  const exposedAt = column("exposed_comm_ms"), commAt = column("comm_ms");
  const rows = [];
  m.steps.forEach((step, i) => {
    const ms = column("step_ms")[i];
    if (ms === null || i < first) return;
    const exposed = exposedAt && exposedAt[i] !== null ? exposedAt[i] : 0;
    rows.push([step, ms - exposed, exposed, commAt && commAt[i] !== null ? commAt[i] : 0]);
  });
  const bin = Math.max(1, Math.ceil(rows.length / 600));
  const binned = [];
  for (let i = 0; i < rows.length; i += bin) {
    const part = rows.slice(i, i + bin), mean = k => part.reduce((a, r) => a + r[k], 0) / part.length;
    binned.push([part[0][0], mean(1), mean(2), mean(3)]);
  }
  const points = k => binned.map(r => ({x: r[0], y: r[k]}));
  const datasets = [line(exposedAt ? "compute" : "step time", points(1), colors.compute, {fill: "origin", backgroundColor: colors.compute + "99", stack: "step"})];
  if (exposedAt) datasets.push(line("exposed communication", points(2), colors.exposed, {fill: "-1", backgroundColor: colors.exposed + "99", stack: "step"}));
  if (anyPositive("comm_ms")) datasets.push(line("all gradient communication", points(3), colors.comm, {borderDash: [5, 4], stack: "comm"}));
  chart("step-time", "Step time", (exposedAt ? "compute (step time − exposed communication) and the communication no compute hid" :
        "wall time of each step (this metrics file has no communication columns)") + (bin > 1 ? "; means over " + bin + " steps" : "") + note,
        lineConfig(datasets, {y: axis("ms", {stacked: true, beginAtZero: true})}, {plugins: {decimation: {enabled: false}}}));
}
if (column("peak_bytes"))
  chart("memory", "Memory", "the CPU allocator's peak and current bytes after each step",
        lineConfig([line("peak", series("peak_bytes", mib), colors.peak), line("current", series("current_bytes", mib), colors.current)],
                   {y: axis("MiB", {beginAtZero: true})}));
if (anyPositive("loss_scale")) {
  const datasets = [line("loss scale", series("loss_scale", v => v, y => y > 0), colors.scale, {stepped: true})];
  if (skipped) {
    const scaleAt = column("loss_scale");
    datasets.push(line("skipped step", series("skipped", (v, i) => scaleAt[i], (y, i) => column("skipped")[i] > 0 && y > 0),
                       colors.exposed, {showLine: false, pointRadius: 4}));
  }
  chart("loss-scale", "Loss scale", "dynamic loss scaling: the scale of each step, and the steps an Inf or NaN gradient skipped",
        lineConfig(datasets, {y: axis("scale (log)", {type: "logarithmic"})}));
}

// The trace: each shown actor's handler runs as bars on its row, the critical path's runs over them.
const trace = run.trace;
if (trace && trace.rows.length) {
  const names = trace.rows.map(r => r.name), shown = new Set(names);
  const busy = [], critical = [];
  for (const r of trace.rows) for (const [start, us] of r.runs) busy.push({x: [start, start + us], y: r.name});
  for (const s of trace.steps) for (const p of s.path) if (shown.has(p.actor)) critical.push({x: [p.start_us, p.start_us + p.us], y: p.actor});
  // (a lower order draws on top: the critical path over the runs)
  const bars = (label, data, color, order) => ({label, data, backgroundColor: color, borderWidth: 0, grouped: false, order,
                                                  barPercentage: 1, categoryPercentage: 0.72, minBarLength: 2});
  chart("timeline", "Actor timeline", "each actor's handler runs over the traced step (" + names.length + " of " + trace.actors +
        " actors: those on the critical path, then the busiest), the critical path's runs in orange",
        {type: "bar", data: {labels: names, datasets: [bars("handler run", busy, colors.busy, 1), bars("critical path", critical, colors.critical, 0)]},
         options: {indexAxis: "y",
                   scales: {x: axis("µs since the trace began", {type: "linear", min: 0}), y: {ticks: {autoSkip: false, font: {size: 10}}}},
                   plugins: {tooltip: {callbacks: {label: c => c.dataset.label + ": " + fmt(c.raw.x[0], 6) + "–" + fmt(c.raw.x[1], 6) +
                                                          " µs (" + fmt(c.raw.x[1] - c.raw.x[0]) + " µs)"}}}}},
        {wide: true, height: 70 + 17 * names.length});
}

const grid = document.getElementById("charts");
for (const s of specs) {
  const card = document.createElement("section");
  card.className = s.wide ? "card wide" : "card";
  const h = document.createElement("h2");
  h.textContent = s.title;
  const note = document.createElement("p");
  note.className = "note";
  note.textContent = s.note;
  const box = document.createElement("div");
  box.className = "chart";
  if (s.height) box.style.height = s.height + "px";
  const canvas = document.createElement("canvas");
  canvas.id = "chart-" + s.id;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", s.title);
  box.append(canvas);
  card.append(h, note, box);
  grid.append(card);
  s.canvas = canvas;
}
// The critical path of each traced step, in order.
if (trace) for (const s of trace.steps) {
  const card = document.createElement("section");
  card.className = "card wide";
  card.id = "critical-path-" + s.step;
  const h = document.createElement("h2");
  h.textContent = "Critical path of step " + s.step;
  const note = document.createElement("p");
  note.className = "note";
  note.textContent = s.path.length + " handler runs, " + fmt(s.critical_path_us / 1000, 3) + " ms of the step's " + fmt(s.wall_us / 1000, 3) +
                     " ms wall time (" + fmt(100 * s.critical_path_us / Math.max(1e-9, s.wall_us), 3) + " %); the runs that decided when the step ended, first to last";
  const list = document.createElement("ol");
  list.className = "path";
  for (const p of s.path) {
    const item = document.createElement("li");
    const time = document.createElement("span");
    time.className = "time";
    time.textContent = " " + fmt(p.us, 3) + " µs, at " + fmt(p.start_us, 6) + " µs";
    item.append(p.actor, time);
    list.append(item);
  }
  card.append(h, note, list);
  grid.append(card);
}
const sources = ["metrics " + run.metrics_file];
if (run.trace_file) sources.push("trace " + run.trace_file);
if (trace) figure(fmt(trace.steps.length ? trace.steps[trace.steps.length - 1].wall_us / 1000 : trace.span_us / 1000, 3) + " ms", "traced step, wall time");
document.getElementById("sources").textContent = sources.join(" · ") + " · " + run.generator;
const figureBox = document.getElementById("figures");
for (const [value, label] of figures) {
  const f = document.createElement("div");
  f.className = "figure";
  const b = document.createElement("b");
  b.textContent = value;
  const span = document.createElement("span");
  span.textContent = label;
  f.append(b, span);
  figureBox.append(f);
}
if (!specs.length) statusLine.textContent = "0 charts drawn: the metrics file has no column to chart";
for (const s of specs) new Chart(s.canvas, s.config);
</script>
</body>
</html>
)html";

// `text` safe inside HTML elements and attributes.
std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string report_html(const std::string& title, const std::string& data) {
  // `<` occurs in JSON only inside strings, where \u003c means the same: the data can then never
  // close its <script> element.
  std::string safe_data;
  for (char c : data) {
    if (c == '<') safe_data += "\\u003c";
    else safe_data += c;
  }
  const std::string escaped_title = escape_html(title);
  // Placeholders are replaced in the template only, never inside what replaced one.
  std::string page;
  std::size_t at = 0;
  for (std::size_t next; (next = kPage.find('@', at)) != std::string_view::npos;) {
    page += kPage.substr(at, next - at);
    const std::size_t end = kPage.find('@', next + 1);
    const std::string_view key = kPage.substr(next + 1, end - next - 1);
    if (key == "TITLE") page += escaped_title;
    else if (key == "CHARTJS") page += chartjs_source();
    else if (key == "DATA") page += safe_data;
    at = end + 1;
  }
  page += kPage.substr(at);
  return page;
}

}  // namespace troupe::apps
