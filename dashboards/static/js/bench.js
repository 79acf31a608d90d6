// Stored JCT benchmark runs: average and p95 JCT per policy, a JCT CDF per policy, and the
// esa/atp and esa/static ratios.

import { api, token } from "./api.js";
import { lineChart } from "./svgchart.js";
import { duration, el, parseTime } from "./format.js";

const POLICY_ORDER = ["static", "atp", "esa"];
const POLICY_COLOURS = { static: "#6b7280", atp: "#d97706", esa: "#059669" };
const FALLBACK_COLOURS = ["#2563eb", "#db2777", "#7c3aed", "#0891b2"];
// A line style per curve, so curves that coincide (static under esa when memory is ample)
// stay visible: solid, dashed, dotted, dash-dot.
const DASHES = ["", "7 4", "2 3", "8 3 2 3"];

// Linear interpolation between ranks, as numpy.percentile (bench.jct_results) computes it.
export function percentile(sorted, q) {
  if (!sorted.length) return NaN;
  const rank = q * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.min(sorted.length - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

function jctOf(row) {
  for (const key of ["jct_s", "jct", "jct_seconds"]) {
    const v = Number(row[key]);
    if (row[key] !== undefined && row[key] !== "" && Number.isFinite(v)) return v;
  }
  return null;
}

// {policy: sorted JCTs} from the run's job rows.
export function jctsByPolicy(run) {
  const groups = {};
  const fallback = (run.summary && run.summary.policy) || run.policy || "run";
  for (const row of run.jobs || []) {
    const jct = jctOf(row);
    if (jct === null) continue;
    const policy = row.policy || fallback;
    (groups[policy] ||= []).push(jct);
  }
  for (const list of Object.values(groups)) list.sort((a, b) => a - b);
  return groups;
}

// summary.json (bench.jct_output): {"policies": {p: {avg_jct, p50_jct, p95_jct, p99_jct,
// memory_utilisation, in_switch_share}}, "ratios": {esa_over_atp, esa_over_static}}.
const SUMMARY_KEYS = {
  mean: "avg_jct",
  p50: "p50_jct",
  p95: "p95_jct",
  p99: "p99_jct",
  utilisation: "memory_utilisation",
  inSwitch: "in_switch_share",
};

function num(value) {
  return value === null || value === undefined || value === "" ? NaN : Number(value);
}

// Per policy: the JCT figures of summary.json where the run has them, else computed from the
// job rows (which the CDF always uses).
export function policyStats(run) {
  const groups = jctsByPolicy(run);
  const fromSummary = (run.summary && run.summary.policies) || {};
  const stats = {};
  for (const policy of new Set([...Object.keys(groups), ...Object.keys(fromSummary)])) {
    const jcts = groups[policy] || [];
    const s = {
      n: jcts.length || NaN,
      mean: jcts.length ? jcts.reduce((a, b) => a + b, 0) / jcts.length : NaN,
      p50: percentile(jcts, 0.5),
      p95: percentile(jcts, 0.95),
      p99: percentile(jcts, 0.99),
      utilisation: NaN,
      inSwitch: NaN,
    };
    const given = fromSummary[policy] || {};
    for (const [key, name] of Object.entries(SUMMARY_KEYS)) {
      if (Number.isFinite(num(given[name]))) s[key] = num(given[name]);
    }
    stats[policy] = s;
  }
  return { stats, groups };
}

// Baseline average JCT / esa average JCT, as bench.jct_results.ratios (>1: esa is faster).
export function speedup(run, stats, base, key = "mean") {
  const stored = run.summary && run.summary.ratios && num(run.summary.ratios[`esa_over_${base}`]);
  if (key === "mean" && Number.isFinite(stored)) return stored;
  return stats.esa && stats[base] && stats.esa[key] > 0 ? stats[base][key] / stats.esa[key] : NaN;
}

function orderPolicies(names) {
  return [...names].sort((a, b) => {
    const ia = POLICY_ORDER.indexOf(a);
    const ib = POLICY_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
}

function colourOf(policy, i) {
  return POLICY_COLOURS[policy] || FALLBACK_COLOURS[i % FALLBACK_COLOURS.length];
}

export class BenchView {
  constructor(root, notify) {
    this.root = root;
    this.notify = notify;
    this.runs = [];
    this.selected = null;
    this.run = null;
  }

  async show() {
    if (!token.get()) {
      this.root.replaceChildren(
        el("h2", {}, "Benchmarks"),
        el("p", { class: "empty" }, "Enter your tenant token (top right) to see the stored benchmark runs."),
      );
      return;
    }
    await this.loadRuns();
  }

  async loadRuns() {
    try {
      this.runs = (await api.benchRuns()) || [];
    } catch (error) {
      this.root.replaceChildren(el("p", { class: "empty" }, `Benchmark runs could not be loaded: ${error.detail || error.message}`));
      return;
    }
    this.runs.sort((a, b) => (parseTime(b.created_at) ?? 0) - (parseTime(a.created_at) ?? 0) || String(b.id).localeCompare(String(a.id)));
    if (!this.runs.some((r) => r.id === this.selected)) this.selected = this.runs.length ? this.runs[0].id : null;
    await this.loadRun();
  }

  async loadRun() {
    this.run = null;
    if (this.selected !== null) {
      try {
        this.run = await api.benchRun(this.selected);
      } catch (error) {
        this.notify(`Run ${this.selected} could not be loaded: ${error.detail || error.message}`, "error");
      }
    }
    this.render();
  }

  render() {
    if (!this.runs.length) {
      this.root.replaceChildren(
        el("h2", {}, "Benchmarks"),
        el(
          "div",
          { class: "empty bench-empty" },
          el("p", {}, "No JCT benchmark run is stored yet."),
          el(
            "p",
            {},
            el("code", {}, "inasched bench jct"),
            " stores its run here only when it is given this service and your tenant token; without ",
            el("code", {}, "--service"),
            " and ",
            el("code", {}, "--token"),
            " it writes the run to its ",
            el("code", {}, "--out"),
            " folder only. For example:",
          ),
          el(
            "pre",
            {},
            `inasched bench jct --workload synthetic-10 --out results/first \\\n    --service ${location.origin} --token YOUR_TENANT_TOKEN`,
          ),
        ),
      );
      return;
    }
    const list = el(
      "div",
      { class: "panel runs" },
      el("h3", {}, "Stored runs"),
      el(
        "table",
        { class: "jobs" },
        el("thead", {}, el("tr", {}, el("th", {}, "run"), el("th", {}, "created"), el("th", {}, "workload"), el("th", {}, "backend"))),
        el(
          "tbody",
          {},
          this.runs.map((r) =>
            el(
              "tr",
              {
                class: r.id === this.selected ? "selected" : "clickable",
                dataset: { runId: r.id },
                onclick: () => {
                  this.selected = r.id;
                  this.loadRun();
                },
              },
              el("td", {}, String(r.id)),
              el("td", {}, formatWhen(r.created_at)),
              el("td", { class: "workload", title: String(r.workload ?? "") }, String(r.workload ?? "")),
              el("td", { class: "backend" }, String(r.backend ?? "")),
            ),
          ),
        ),
      ),
    );
    this.root.replaceChildren(el("h2", {}, "Benchmarks"), el("div", { class: "bench-grid" }, list, this.runDetail()));
  }

  runDetail() {
    const run = this.run;
    if (!run) return el("div", { class: "panel" }, el("p", { class: "empty" }, "Select a run."));
    const { stats, groups } = policyStats(run);
    const policies = orderPolicies(Object.keys(stats));
    const ratioCard = (base) => {
      const avg = speedup(run, stats, base, "mean");
      const p95 = speedup(run, stats, base, "p95");
      return el(
        "div",
        { class: "stat ratio", dataset: { ratio: `esa/${base}` }, title: `${base} JCT ÷ esa JCT: above 1, esa finishes jobs sooner` },
        el("span", { class: "lbl" }, `esa over ${base}: ${base} JCT ÷ esa JCT`),
        el("span", { class: "num" }, Number.isFinite(avg) ? `${avg.toFixed(2)}×` : "–"),
        el("span", { class: "muted" }, Number.isFinite(avg) ? `average JCT; p95 ${Number.isFinite(p95) ? `${p95.toFixed(2)}×` : "–"}` : `the run lacks esa or ${base}`),
      );
    };
    const share = (v) => (Number.isFinite(v) ? `${Math.round(v * 100)}%` : "–");
    const table = el(
      "table",
      { class: "jobs stats-table" },
      el("thead", {}, el("tr", {}, ["policy", "jobs", "avg JCT", "p50", "p95", "p99", "memory used", "in switch"].map((h) => el("th", {}, h)))),
      el(
        "tbody",
        {},
        policies.map((p, i) =>
          el(
            "tr",
            { dataset: { policy: p } },
            el("td", {}, el("span", { class: "swatch", style: `background:${colourOf(p, i)}` }), p),
            el("td", { class: "num" }, Number.isFinite(stats[p].n) ? stats[p].n : "–"),
            el("td", { class: "num avg" }, duration(stats[p].mean)),
            el("td", { class: "num" }, duration(stats[p].p50)),
            el("td", { class: "num p95" }, duration(stats[p].p95)),
            el("td", { class: "num" }, duration(stats[p].p99)),
            el("td", { class: "num" }, share(stats[p].utilisation)),
            el("td", { class: "num" }, share(stats[p].inSwitch)),
          ),
        ),
      ),
    );
    const series = orderPolicies(Object.keys(groups)).map((p, i) => {
      const jcts = groups[p];
      return {
        name: p,
        color: colourOf(p, i),
        dash: DASHES[i % DASHES.length],
        step: true,
        points: [[jcts[0], 0], ...jcts.map((v, k) => [v, (k + 1) / jcts.length])],
      };
    });
    // JCTs span seconds to weeks: a log axis, as JCT CDFs are drawn in the field, keeps the
    // short jobs (most of them) from crowding the left edge. Whole decades at both ends.
    const positive = Object.values(groups).flat().filter((v) => v > 0);
    const cdf = series.length
      ? lineChart(series, {
          width: 680,
          height: 280,
          yMin: 0,
          yMax: 1,
          xLog: true,
          xMin: positive.length ? 10 ** Math.floor(Math.log10(Math.min(...positive))) : 1,
          xMax: positive.length ? 10 ** Math.ceil(Math.log10(Math.max(...positive))) : 10,
          xFormat: secondsText,
          xLabel: "JCT (s, log scale)",
          yLabel: "fraction of jobs",
          yFormat: (v) => v.toFixed(1),
          legend: true,
          title: "JCT CDF per policy",
        })
      : el("p", { class: "empty" }, "This run stores no per-job JCTs.");
    return el(
      "div",
      { class: "panel run-detail" },
      el("h3", { class: "run-title" }, `Run ${run.id}`, el("span", { class: "muted" }, ` · ${run.workload ?? ""} · ${run.backend ?? ""}`)),
      el("div", { class: "stats" }, ratioCard("atp"), ratioCard("static")),
      table,
      el("figure", {}, el("figcaption", {}, "JCT CDF per policy"), cdf),
    );
  }
}

// Log-axis ticks: 1 s, 10 s, 100 s, 1k s, 10k s, 100k s, 1M s (and 2, 5 times them).
function secondsText(v) {
  for (const [scale, suffix] of [[1e6, "M"], [1e3, "k"]]) {
    if (v >= scale) return `${+(v / scale).toPrecision(3)}${suffix}`;
  }
  return `${+v.toPrecision(3)}`;
}

function formatWhen(value) {
  const ms = parseTime(value);
  return ms === null ? String(value ?? "") : new Date(ms).toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" });
}
