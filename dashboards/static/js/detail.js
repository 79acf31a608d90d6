// One job: its numbers, priority level over time, throughput, preemptions suffered and caused,
// and its workers with their last heartbeat.

import { api, token } from "./api.js";
import { store } from "./store.js";
import { lineChart } from "./svgchart.js";
import {
  ENDED_STATES,
  bytes,
  count,
  duration,
  el,
  jobClock,
  jobRgb,
  packets,
  parseTime,
  pct,
  rgbCss,
  switchShare,
  whyText,
} from "./format.js";

const REFRESH_MS = 1000;
// bytes/s: the throughput axis reaches at least this, so that a job at rest reads 0 to 1 KB/s.
const MIN_RATE_AXIS = 1000;
const CALLOUT_LABELS = { failed: "Failed", queued: "Queued", cancelled: "Cancelled", admitted: "Not started" };
const MAX_SAMPLES = 300;

export class JobDetail {
  constructor(root, notify) {
    this.root = root;
    this.notify = notify;
    this.id = null;
    this.job = null;
    this.samples = []; // [ms, bytes moved, iterations done]
    this.timer = null;
    this.armed = false;
  }

  show(id) {
    if (id !== this.id) {
      this.id = id;
      this.job = null;
      this.samples = [];
      this.armed = false;
      this.root.replaceChildren(el("p", { class: "muted" }, `Loading job #${id}…`));
    }
    this.refresh();
    clearInterval(this.timer);
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  hide() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async refresh() {
    const id = this.id;
    if (!token.get()) {
      this.root.replaceChildren(el("p", { class: "empty" }, "Enter your tenant token (top right) to see job details."));
      return;
    }
    try {
      const job = await api.job(id);
      if (id !== this.id) return;
      store.ownIds.add(job.id); // the service shows a tenant only its own jobs
      this.accept(job);
    } catch (error) {
      if (id !== this.id) return;
      this.hide();
      this.root.replaceChildren(
        el("p", { class: "empty" }, `Job #${id} could not be loaded: ${error.detail || error.message}`),
        el("p", {}, el("a", { href: "#/" }, "← back to jobs")),
      );
    }
  }

  // A job event from the stream lacks workers and history: keep the last full copy's.
  onJobEvent(job) {
    if (this.job && job.id === this.id) this.accept({ ...this.job, ...job });
  }

  accept(job) {
    this.job = job;
    const moved = Number(job.bytes_switch || 0) + Number(job.bytes_ps || 0);
    const last = this.samples[this.samples.length - 1];
    const now = Date.now();
    if (!last || now - last[0] >= 500) this.samples.push([now, moved, Number(job.iterations_done || 0)]);
    if (this.samples.length > MAX_SAMPLES) this.samples.shift();
    if (ENDED_STATES.has(job.state)) this.hide();
    this.render();
  }

  render() {
    const job = this.job;
    const share = switchShare(job);
    const clock = jobClock(job);
    const counters = (store.switch && store.switch.counters && store.switch.counters.jobs) || {};
    const live = counters[String(job.id)] || {};
    const held = ((store.switch && store.switch.runs) || [])
      .filter((run) => run[2] === job.id)
      .reduce((sum, run) => sum + run[1], 0);
    const done = Number(job.iterations_done || 0);
    const total = Number(job.iterations || 0);

    const stat = (label, value, extra = null) =>
      el("div", { class: "stat" }, el("span", { class: "lbl" }, label), el("span", { class: "num" }, value), extra);

    const head = el(
      "div",
      { class: "detail-head" },
      el("a", { href: "#/" }, "← jobs"),
      el("span", { class: "swatch big", style: `background:${rgbCss(jobRgb(job.id))}` }),
      el("h2", {}, `#${job.id} ${job.name || ""}`),
      el("span", { class: `state state-${job.state}` }, job.state),
      el("span", { class: "muted" }, [job.policy || "no policy yet", job.model, `${job.n_workers} workers`, `${bytes(Number(job.gradient_bytes))} gradient`].filter(Boolean).join(" · ")),
      this.cancelButton(job),
    );
    const why = whyText(job);
    const callout = why
      ? el("p", { class: `callout callout-${job.state}`, role: "status" }, el("strong", {}, `${CALLOUT_LABELS[job.state] || job.state}: `), why)
      : null;

    const stats = el(
      "div",
      { class: "stats" },
      stat("progress", `${done} / ${total}`, el("span", { class: "muted" }, total ? pct(done / total) : "")),
      clock.seconds === null && clock.note ? stat(clock.label, "–", el("span", { class: "muted" }, clock.note)) : stat(clock.label, duration(clock.seconds)),
      stat("priority level", job.priority_level ?? "–"),
      stat("throughput", ...this.throughputText()),
      stat("in switch / at PS", share === null ? "–" : `${pct(share)} / ${pct(1 - share)}`, el("span", { class: "muted" }, `${bytes(Number(job.bytes_switch || 0))} / ${bytes(Number(job.bytes_ps || 0))}`)),
      stat("preemptions caused", count(Number(job.preemptions_caused || 0)), el("span", { class: "muted" }, `switch: ${count(packets(live.job_preempted))} pkts`)),
      stat("preemptions suffered", count(Number(job.preemptions_suffered || 0)), el("span", { class: "muted" }, `switch: ${count(packets(live.job_evicted))} pkts`)),
      stat("aggregators held", count(held), el("span", { class: "muted" }, `bypassed ${count(packets(live.job_bypassed))} pkts`)),
    );

    const charts = el(
      "div",
      { class: "charts" },
      el("figure", { class: "panel" }, el("figcaption", {}, "Priority level over time"), this.priorityChart(job)),
      el("figure", { class: "panel" }, el("figcaption", {}, "Throughput (gradient bytes per second, while this page is open)"), this.throughputChart(job)),
    );

    // Each part lives in its own box; the head (with the cancel button) is only rebuilt when
    // what it shows changes, so the once-a-second refresh cannot swallow a click on it.
    if (!this.boxes || !this.root.contains(this.boxes.head)) {
      this.boxes = { head: el("div"), stats: el("div"), charts: el("div"), workers: el("div") };
      this.headKey = null;
      this.root.replaceChildren(...Object.values(this.boxes));
    }
    const headKey = JSON.stringify([job.id, job.name, job.state, why, job.policy, job.model, job.n_workers, this.armed, store.ownIds.has(job.id)]);
    if (headKey !== this.headKey) {
      this.headKey = headKey;
      this.boxes.head.replaceChildren(head, callout || "");
    }
    this.boxes.stats.replaceChildren(stats);
    this.boxes.charts.replaceChildren(charts);
    this.boxes.workers.replaceChildren(this.workersTable(job));
  }

  cancelButton(job) {
    if (!store.ownIds.has(job.id) || ENDED_STATES.has(job.state)) return null;
    return el(
      "button",
      {
        type: "button",
        class: this.armed ? "danger armed" : "danger",
        onclick: async () => {
          if (!this.armed) {
            this.armed = true;
            this.render();
            return;
          }
          this.armed = false;
          try {
            const cancelled = await api.cancel(job.id);
            store.putJob(cancelled);
            this.accept({ ...this.job, ...cancelled });
            this.notify(`Job #${job.id} cancelled.`, "info");
          } catch (error) {
            this.notify(`Could not cancel job #${job.id}: ${error.detail || error.message}`, "error");
          }
        },
      },
      this.armed ? "Confirm cancel" : "Cancel job",
    );
  }

  rates() {
    const s = this.samples;
    const out = [];
    for (let i = 1; i < s.length; i += 1) {
      const dt = (s[i][0] - s[i - 1][0]) / 1000;
      if (dt > 0) out.push([(s[i][0] - s[0][0]) / 1000, (s[i][1] - s[i - 1][1]) / dt, (s[i][2] - s[i - 1][2]) / dt]);
    }
    return out;
  }

  throughputText() {
    const job = this.job;
    const clock = jobClock(job);
    const done = Number(job.iterations_done || 0);
    const avg = clock.seconds > 0 && clock.label !== "queued" ? done / clock.seconds : null;
    const rates = this.rates().slice(-3);
    if (rates.length && !ENDED_STATES.has(job.state)) {
      const bps = rates.reduce((a, r) => a + r[1], 0) / rates.length;
      const ips = rates.reduce((a, r) => a + r[2], 0) / rates.length;
      return [`${bytes(bps)}/s`, el("span", { class: "muted" }, `${ips.toFixed(1)} it/s now`)];
    }
    return [avg === null ? "–" : `${avg.toFixed(2)} it/s`, el("span", { class: "muted" }, "average")];
  }

  priorityChart(job) {
    const history = (job.priority_history || [])
      .map((p) => [parseTime(p.t), Number(p.level)])
      .filter((p) => p[0] !== null)
      .sort((a, b) => a[0] - b[0]);
    if (!history.length) return el("p", { class: "empty" }, "No priority changes recorded.");
    // Levels are set from submission on (a queued job has one too).
    const t0 = parseTime(job.submitted_at) ?? history[0][0];
    const end = ENDED_STATES.has(job.state) ? parseTime(job.finished_at) ?? history[history.length - 1][0] : Date.now();
    const points = history.map(([t, level]) => [(t - t0) / 1000, level]);
    const xMax = Math.max((end - t0) / 1000, points[points.length - 1][0], 1);
    return lineChart([{ name: "priority", color: rgbCss(jobRgb(job.id)), points, step: true, extendTo: xMax }], {
      width: 560,
      height: 200,
      xMin: Math.min(0, points[0][0]),
      xMax,
      yMin: 0,
      yMax: Math.max(1, ...points.map((p) => p[1])),
      xLabel: "seconds since submission",
      yLabel: "level",
      yWhole: true,
      xFormat: (v) => String(v),
      title: "priority level over time",
    });
  }

  throughputChart(job) {
    const rates = this.rates();
    if (rates.length < 2) return el("p", { class: "empty throughput-note" }, this.noThroughputText(job));
    const chart = lineChart([{ name: "bytes/s", color: rgbCss(jobRgb(job.id)), points: rates.map((r) => [r[0], r[1]]) }], {
      width: 560,
      height: 200,
      yMin: 0,
      // A floor of whole bytes: at 0 B/s an axis of 0 to 1 B/s would read "0B, 1B, 1B".
      yMax: Math.max(MIN_RATE_AXIS, ...rates.map((r) => r[1])),
      xLabel: "seconds on this page",
      yLabel: "bytes/s",
      yFormat: (v) => bytes(v).replace(" ", ""),
      title: "throughput",
    });
    if (rates[rates.length - 1][1] > 0) return chart;
    const why = "0 B/s now: no gradient moved since the last sample (the workers compute, wait for a peer, or stopped).";
    return el("div", {}, chart, el("p", { class: "muted throughput-note" }, why));
  }

  // Why the throughput chart is empty: it samples only while the job runs and the page is open.
  noThroughputText(job) {
    if (ENDED_STATES.has(job.state)) {
      const clock = jobClock(job);
      const moved = Number(job.bytes_switch || 0) + Number(job.bytes_ps || 0);
      const avg = clock.seconds > 0 ? `: ${bytes(moved / clock.seconds)}/s on average over ${duration(clock.seconds)}` : "";
      return `The job ${job.state}${avg}. Throughput is sampled only while a job runs and this page is open.`;
    }
    if (job.state === "queued") return "No throughput yet: the job is queued.";
    if (job.state === "admitted") return "No throughput yet: the job waits for its workers to join.";
    return "Collecting samples…";
  }

  workersTable(job) {
    const workers = job.workers || [];
    const now = Date.now();
    const rows = workers.map((w) => {
      const beat = parseTime(w.last_heartbeat);
      const age = beat === null ? null : (now - beat) / 1000;
      const stale = age !== null && age > 5 && !ENDED_STATES.has(job.state);
      return el(
        "tr",
        { class: stale ? "stale" : "" },
        el("td", { class: "num" }, w.worker_id),
        el("td", {}, `${w.host}:${w.port}`),
        el("td", { title: w.last_heartbeat || "" }, age === null ? "never" : `${duration(age)} ago`),
      );
    });
    return el(
      "div",
      { class: "panel workers" },
      el("h3", {}, `Workers (${workers.length})`),
      workers.length
        ? el("table", { class: "jobs" }, el("thead", {}, el("tr", {}, el("th", {}, "worker"), el("th", {}, "data address"), el("th", {}, "last heartbeat"))), el("tbody", {}, rows))
        : el("p", { class: "empty" }, ENDED_STATES.has(job.state) ? "No worker joined this job." : "No worker has joined yet."),
    );
  }
}
