// Switch memory: one cell per aggregator on a canvas, coloured by owning job and shaded by
// state, with the counters and a legend beside it.

import { store } from "./store.js";
import { dropCensus, renderDropDetail } from "./drops.js";
import { FREE_RGB, count, el, jobRgb, pack, packets, pct, rgbCss } from "./format.js";
import { token } from "./api.js";
import { FabricHeatmaps } from "./fabric.js";

const STATES = { 1: "partial", 2: "complete", 3: "flushed" };
const MAX_HEIGHT = 330; // px: keeps the heatmap and the jobs table on one laptop screen
const MAX_CELL = 22;
const SAMPLE_JOBS = [1, 2, 3]; // hues for the state key while no job holds memory
// The stream sends the switch view only when it changed (docs/CONTRACTS.md), within about a
// second: a view this old means nothing was counted since, so the per-second rates read 0.
const STILL_MS = 2500;

export class Heatmap {
  constructor(root) {
    this.canvas = root.querySelector("#heatmap");
    this.tip = root.querySelector("#heatmap-tip");
    this.legendJobs = root.querySelector("#legend-jobs");
    this.legendStates = root.querySelector("#legend-states");
    this.summary = root.querySelector("#switch-summary");
    this.unavailable = root.querySelector("#switch-unavailable");
    this.empty = root.querySelector("#heatmap-empty");
    this.dropDetail = root.querySelector("#drops-detail");
    this.fabric = new FabricHeatmaps(root.querySelector("#fabric-heatmaps"));
    this.counterEls = {
      used: root.querySelector("#c-used"),
      preemptions: root.querySelector("#c-preemptions"),
      bypasses: root.querySelector("#c-bypasses"),
      drops: root.querySelector("#c-drops"),
    };
    this.runs = []; // sorted by start
    this.geometry = null;
    this.pending = false;
    this.previous = null; // {at, totals} for per-second rates
    this.renderStateLegend();
    this.canvas.addEventListener("mousemove", (e) => this.showTip(e));
    this.canvas.addEventListener("mouseleave", () => {
      this.tip.hidden = true;
    });
    new ResizeObserver(() => this.schedule()).observe(this.canvas.parentElement);
    setInterval(() => this.still(), 1000);
  }

  // No new view for STILL_MS: the counters stood still, so each rate is 0 from the last view on.
  still() {
    const prev = this.previous;
    if (!store.switch || !prev || Date.now() - prev.at < STILL_MS) return;
    this.renderCounters(store.switch, Date.now());
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const snap = store.switch;
    this.renderEmpty(snap);
    if (!snap) return;
    this.runs = [...(snap.runs || [])].sort((a, b) => a[0] - b[0]);
    this.draw(snap.aggregators);
    this.renderCounters(snap);
    this.renderJobLegend(snap);
    this.fabric.render(snap);
  }

  // No snapshot: without a token the page gets none (the stream is per tenant), so say so
  // instead of leaving a blank grid and dashes.
  renderEmpty(snap) {
    this.empty.hidden = Boolean(snap);
    this.canvas.hidden = !snap;
    this.empty.textContent = token.get()
      ? "Waiting for the switch's first snapshot…"
      : "Enter your tenant token (top right): the switch memory, its counters and your jobs come from the service for that token.";
    if (snap) return;
    for (const node of Object.values(this.counterEls)) {
      node.textContent = "–";
      node.title = "";
      node.classList.remove("alarm");
    }
    this.previous = null;
    this.dropDetail.hidden = true;
    this.runs = [];
    this.renderJobLegend({});
  }

  layout(n) {
    const width = Math.max(200, Math.floor(this.canvas.parentElement.clientWidth));
    const cell = Math.max(1, Math.min(MAX_CELL, Math.floor(Math.sqrt((width * MAX_HEIGHT) / n))));
    const cols = Math.max(1, Math.floor(width / cell));
    const rows = Math.ceil(n / cols);
    return { n, cell, cols, rows };
  }

  draw(n) {
    const g = this.layout(n);
    this.geometry = g;
    const cssW = g.cols * g.cell;
    const cssH = g.rows * g.cell;
    const dpr = window.devicePixelRatio || 1;
    const canvas = this.canvas;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
      canvas.style.width = `${cssW}px`;
      canvas.style.height = `${cssH}px`;
    }
    // Geometry on the element lets a reader (or a test) map an aggregator to its cell.
    Object.assign(canvas.dataset, { aggregators: n, cols: g.cols, cell: g.cell });

    // One pixel per aggregator, then scaled up without smoothing: cheap even at 64K cells.
    const image = new ImageData(g.cols, g.rows);
    const px = new Uint32Array(image.data.buffer);
    px.fill(pack([250, 250, 250])); // past the last aggregator
    px.fill(pack(FREE_RGB), 0, n);
    const colours = new Map();
    for (const [start, length, jobId, state] of this.runs) {
      const shade = STATES[state] || "complete";
      const key = `${jobId}/${shade}`;
      if (!colours.has(key)) colours.set(key, pack(jobRgb(jobId, shade)));
      px.fill(colours.get(key), start, Math.min(n, start + length));
    }
    const bitmap = this.offscreen(g.cols, g.rows);
    bitmap.getContext("2d").putImageData(image, 0, 0);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.drawImage(bitmap, 0, 0, cssW, cssH);
    if (g.cell >= 6) this.drawGrid(ctx, g, cssW, cssH);
  }

  offscreen(w, h) {
    if (!this.bitmap || this.bitmap.width !== w || this.bitmap.height !== h) {
      this.bitmap = document.createElement("canvas");
      this.bitmap.width = w;
      this.bitmap.height = h;
    }
    return this.bitmap;
  }

  drawGrid(ctx, g, w, h) {
    ctx.strokeStyle = "rgba(255, 255, 255, 0.9)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let c = 1; c < g.cols; c += 1) {
      ctx.moveTo(c * g.cell + 0.5, 0);
      ctx.lineTo(c * g.cell + 0.5, h);
    }
    for (let r = 1; r < g.rows; r += 1) {
      ctx.moveTo(0, r * g.cell + 0.5);
      ctx.lineTo(w, r * g.cell + 0.5);
    }
    ctx.stroke();
  }

  totals(snap) {
    const jobs = (snap.counters && snap.counters.jobs) || {};
    const drops = (snap.counters && snap.counters.drops) || {};
    let preemptions = 0;
    let bypasses = 0;
    for (const c of Object.values(jobs)) {
      preemptions += packets(c.job_preempted);
      bypasses += packets(c.job_bypassed);
    }
    // Only the drops that point at a misconfigured sender: late packets of ended jobs are not.
    const census = dropCensus(drops);
    return { preemptions, bypasses, drops: census.alarming, census };
  }

  renderCounters(snap, now = store.switchAt) {
    const used = this.runs.reduce((sum, run) => sum + run[1], 0);
    const totals = this.totals(snap);
    const prev = this.previous;
    const dt = prev ? (now - prev.at) / 1000 : 0;
    // A switch that serves no register reads: no run is known, which is not "all free"; one
    // that serves no counter reads: no count is known, which is not "none counted".
    const why = [];
    if (snap.unavailable) why.push(`Occupancy cannot be shown: ${snap.unavailable}.`);
    if (snap.counters_unavailable) why.push(`Counters cannot be shown: ${snap.counters_unavailable}.`);
    this.unavailable.hidden = why.length === 0;
    this.unavailable.textContent = why.join(" ");
    this.canvas.parentElement.hidden = Boolean(snap.unavailable); // no grid that reads "all free"
    this.counterEls.used.textContent = snap.unavailable
      ? `? / ${count(snap.aggregators)}`
      : `${count(used)} / ${count(snap.aggregators)}`;
    this.counterEls.used.title = snap.unavailable ? snap.unavailable : `${pct(used / snap.aggregators)} of the pool`;
    for (const key of ["preemptions", "bypasses", "drops"]) {
      const node = this.counterEls[key];
      node.textContent = count(totals[key]);
      const rate = prev && dt > 0.2 ? (totals[key] - prev.totals[key]) / dt : null;
      node.dataset.value = totals[key];
      node.title = rate === null ? "" : `${rate.toFixed(1)} per second`;
    }
    const dropsEl = this.counterEls.drops;
    dropsEl.classList.toggle("alarm", totals.census.alarming > 0);
    const rate = dropsEl.title;
    dropsEl.title = `packets dropped because a sender is misconfigured (per reason below)${rate ? `; ${rate}` : ""}`;
    this.dropDetail.hidden = false;
    renderDropDetail(this.dropDetail, totals.census);
    this.summary.textContent = `${count(snap.aggregators)} aggregators × ${snap.lanes} lanes`;
    this.previous = { at: now, totals };
  }

  // One entry per job on the switch: its hue in the three shades the heatmap draws it in
  // (partial, complete, flushed), its name and the aggregators it holds.
  renderJobLegend(snap) {
    const held = new Map();
    for (const [, length, jobId] of this.runs) held.set(jobId, (held.get(jobId) || 0) + length);
    const jobCounters = (snap.counters && snap.counters.jobs) || {};
    const ids = new Set(held.keys());
    // Jobs that hold nothing right now but are running keep their legend entry.
    for (const job of store.jobs.values()) if (job.state === "running") ids.add(job.id);
    // Entries are kept by job id and updated in place: rebuilding them on every event (several
    // a second) would make their links hard to click.
    const existing = new Map(
      [...this.legendJobs.querySelectorAll("li[data-job-id]")].map((li) => [Number(li.dataset.jobId), li]),
    );
    const sorted = [...ids].sort((a, b) => a - b);
    const items = sorted.map((id) => {
      const li =
        existing.get(id) ||
        el(
          "li",
          { dataset: { jobId: id } },
          el(
            "span",
            { class: "chip", title: "light: partial · full: complete · dark: flushed" },
            el("span", { class: "shade partial", style: `background:${rgbCss(jobRgb(id, "partial"))}` }),
            el("span", { class: "swatch", style: `background:${rgbCss(jobRgb(id))}` }),
            el("span", { class: "shade flushed", style: `background:${rgbCss(jobRgb(id, "flushed"))}` }),
          ),
          el("a", { href: `#/jobs/${id}` }),
          el("span", { class: "muted held" }),
        );
      const c = jobCounters[String(id)] || {};
      li.title = `bypassed ${count(packets(c.job_bypassed))} packets`;
      li.querySelector("a").textContent = `#${id} ${store.jobName(id)}`;
      li.querySelector(".held").textContent = `${count(held.get(id) || 0)} aggs`;
      return li;
    });
    if (!items.length) items.push(this.noJobs || (this.noJobs = el("li", { class: "muted" }, "no job holds switch memory")));
    const same = items.length === this.legendJobs.children.length && items.every((li, i) => this.legendJobs.children[i] === li);
    if (!same) this.legendJobs.replaceChildren(...items);
    this.renderStateLegend(sorted.slice(0, 4));
  }

  // The state key in the hues of the jobs on the switch (a few sample hues when there are
  // none), so that each shade reads the same whatever the job.
  renderStateLegend(jobIds = []) {
    const hues = jobIds.length ? jobIds : SAMPLE_JOBS;
    const key = hues.join(",");
    if (key === this.stateKey) return;
    this.stateKey = key;
    const entry = (state, label, note) =>
      el(
        "li",
        { title: note, dataset: { state } },
        el(
          "span",
          { class: "stripes" },
          hues.map((id) => el("span", { style: `background:${rgbCss(state === "free" ? FREE_RGB : jobRgb(id, state))}` })),
        ),
        label,
      );
    this.legendStates.replaceChildren(
      entry("free", "free", "no job holds it"),
      entry("partial", "partial (light)", "a partial sum, waiting for more workers"),
      entry("complete", "complete (full)", "the sum is complete"),
      entry("flushed", "flushed (dark)", "handed to the PS, which finishes it"),
    );
  }

  showTip(event) {
    const g = this.geometry;
    if (!g) return;
    const rect = this.canvas.getBoundingClientRect();
    const col = Math.floor((event.clientX - rect.left) / g.cell);
    const row = Math.floor((event.clientY - rect.top) / g.cell);
    const index = row * g.cols + col;
    if (col < 0 || col >= g.cols || index < 0 || index >= g.n) {
      this.tip.hidden = true;
      return;
    }
    const run = findRun(this.runs, index);
    this.tip.textContent = run
      ? `aggregator ${index} · #${run[2]} ${store.jobName(run[2])} · ${STATES[run[3]] || run[3]}`
      : `aggregator ${index} · free`;
    this.tip.style.left = `${event.clientX - rect.left + 12}px`;
    this.tip.style.top = `${event.clientY - rect.top + 12}px`;
    this.tip.hidden = false;
  }
}

function findRun(runs, index) {
  let lo = 0;
  let hi = runs.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const [start, length] = runs[mid];
    if (index < start) hi = mid - 1;
    else if (index >= start + length) lo = mid + 1;
    else return runs[mid];
  }
  return null;
}
