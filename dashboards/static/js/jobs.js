// The jobs table: state, policy, priority, progress, elapsed time or JCT, the share of bytes
// aggregated in the switch, filter by state, and cancel for the tenant's own running jobs.

import { api, token } from "./api.js";
import { store } from "./store.js";
import { ENDED_STATES, duration, el, jobClock, jobRgb, pct, rgbCss, switchShare } from "./format.js";

export class JobsTable {
  constructor(root, notify) {
    this.notify = notify;
    this.body = root.querySelector("#jobs-table tbody");
    this.empty = root.querySelector("#jobs-empty");
    this.total = root.querySelector("#jobs-total");
    this.filter = root.querySelector("#state-filter");
    this.filter.addEventListener("change", () => this.load());
    this.armed = new Map(); // job id -> timer: the first click on cancel arms it
    setInterval(() => this.tickClocks(), 1000);
  }

  async load() {
    if (!token.get()) {
      store.forgetTenant();
      return;
    }
    try {
      const page = await api.jobs({ state: this.filter.value });
      store.setJobs(page.items, page.total);
    } catch (error) {
      this.notify(`Could not list jobs (${error.message}). Check the tenant token.`, "error");
    }
  }

  visibleJobs() {
    const wanted = this.filter.value;
    return [...store.jobs.values()]
      .filter((job) => !wanted || job.state === wanted)
      .sort((a, b) => b.id - a.id);
  }

  render() {
    const jobs = this.visibleJobs();
    const rows = new Map([...this.body.rows].map((row) => [Number(row.dataset.jobId), row]));
    const ordered = jobs.map((job) => {
      const row = rows.get(job.id) || el("tr", { dataset: { jobId: job.id } });
      this.fillRow(row, job);
      return row;
    });
    this.body.replaceChildren(...ordered);
    this.empty.hidden = jobs.length > 0;
    this.empty.textContent = token.get()
      ? "No jobs in this state."
      : "Enter your tenant token (top right) to see and cancel your jobs.";
    this.total.textContent = store.jobsTotal === null ? "" : `${jobs.length} shown`;
  }

  updateJob(id) {
    const job = store.jobs.get(id);
    const row = this.body.querySelector(`tr[data-job-id="${id}"]`);
    if (!job) return;
    if (row && (!this.filter.value || job.state === this.filter.value)) this.fillRow(row, job);
    else this.render();
  }

  // Cells are built once per row and then updated in place, so a progress update arriving
  // between a press and a release on the cancel button does not swallow the click.
  fillRow(row, job) {
    if (!row.cells.length) {
      row.append(
        el(
          "td",
          { class: "name" },
          el("span", { class: "swatch", style: `background:${rgbCss(jobRgb(job.id))}` }),
          el("a", { href: `#/jobs/${job.id}` }),
        ),
        el("td", {}, el("span", { class: "state" })),
        el("td", { class: "policy" }),
        el("td", { class: "num prio" }),
        el("td", { class: "progress" }, el("div", { class: "bar" }, el("div", { class: "fill" })), el("span", { class: "progress-text" })),
        el("td", { class: "clock" }),
        el("td", { class: "share" }, el("div", { class: "bar split" }, el("div", { class: "fill" })), el("span", { class: "share-text" })),
        el("td", { class: "actions" }),
      );
    }
    const done = Number(job.iterations_done || 0);
    const total = Number(job.iterations || 0);
    const fraction = total > 0 ? done / total : 0;
    const share = switchShare(job);
    const clock = jobClock(job);
    const $ = (selector) => row.querySelector(selector);
    row.dataset.state = job.state;
    $("td.name a").textContent = `#${job.id} ${job.name || ""}`;
    $("span.state").className = `state state-${job.state}`;
    $("span.state").textContent = job.state;
    $("span.state").title = job.reason || "";
    $("td.policy").textContent = job.policy || "–";
    $("td.prio").textContent = job.priority_level ?? "–";
    $("td.progress .fill").style.width = `${(fraction * 100).toFixed(1)}%`;
    $(".progress-text").textContent = `${done} / ${total}`;
    $("td.clock").title = clock.label;
    $("td.clock").textContent = `${clock.label === "JCT" ? "JCT " : ""}${duration(clock.seconds)}`;
    $("td.share").title = share === null ? "nothing aggregated yet" : `switch ${pct(share)}, PS ${pct(1 - share)}`;
    $("td.share .bar").classList.toggle("none", share === null);
    $("td.share .fill").style.width = `${share === null ? 0 : (share * 100).toFixed(1)}%`;
    $(".share-text").textContent = share === null ? "–" : pct(share);
    const actions = $("td.actions");
    const wanted = this.cancelState(job);
    if (actions.dataset.button !== wanted) {
      actions.dataset.button = wanted;
      actions.replaceChildren(this.cancelButton(job, wanted));
    }
  }

  cancelState(job) {
    if (!store.ownIds.has(job.id) || ENDED_STATES.has(job.state)) return "none";
    return this.armed.has(job.id) ? "armed" : "ready";
  }

  cancelButton(job, state) {
    if (state === "none") return "";
    const armed = state === "armed";
    return el(
      "button",
      {
        type: "button",
        class: armed ? "danger armed" : "danger",
        title: "cancel this job (click twice)",
        onclick: () => this.onCancel(job.id),
      },
      armed ? "Confirm" : "Cancel",
    );
  }

  async onCancel(id) {
    if (!this.armed.has(id)) {
      this.armed.set(
        id,
        setTimeout(() => {
          this.armed.delete(id);
          this.updateJob(id);
        }, 4000),
      );
      this.updateJob(id);
      return;
    }
    clearTimeout(this.armed.get(id));
    this.armed.delete(id);
    try {
      store.putJob(await api.cancel(id));
      this.notify(`Job #${id} cancelled.`, "info");
    } catch (error) {
      this.notify(`Could not cancel job #${id}: ${error.detail || error.message}`, "error");
      this.updateJob(id);
    }
  }

  tickClocks() {
    for (const row of this.body.rows) {
      const job = store.jobs.get(Number(row.dataset.jobId));
      if (!job || ENDED_STATES.has(job.state)) continue;
      const clock = jobClock(job);
      const cell = row.querySelector("td.clock");
      if (cell) cell.textContent = duration(clock.seconds);
    }
  }
}
