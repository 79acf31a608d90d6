// The jobs table: state and why (failed, cancelled, queued), policy, priority, progress, elapsed
// time or JCT, the share of bytes aggregated in the switch, filter by state, pages of
// PAGE_SIZE jobs with the total, and cancel for the tenant's own running jobs.

import { api, token } from "./api.js";
import { store } from "./store.js";
import { ENDED_STATES, clockText, count, el, jobClock, jobRgb, pct, rgbCss, switchShare, whyText } from "./format.js";

export const PAGE_SIZE = 100;
// Reasons listed one per line in the queue summary; the rarer ones share one line.
const QUEUE_REASONS_SHOWN = 6;

export class JobsTable {
  constructor(root, notify) {
    this.notify = notify;
    this.body = root.querySelector("#jobs-table tbody");
    this.empty = root.querySelector("#jobs-empty");
    this.total = root.querySelector("#jobs-total");
    this.filter = root.querySelector("#state-filter");
    this.pager = root.querySelector("#jobs-pager");
    this.range = root.querySelector("#jobs-range");
    this.prev = root.querySelector("#jobs-prev");
    this.next = root.querySelector("#jobs-next");
    this.queueBox = root.querySelector("#queue-summary");
    this.limitsLine = root.querySelector("#tenant-limits");
    this.limitsOf = null; // the token whose limits the line shows
    this.offset = 0;
    this.pageIds = new Set(); // ids of the page the service returned last
    this.pageOffset = 0; // where that page starts (`offset` moves first, on a click)
    this.queued = null; // {total, reasons} of the tenant's queued jobs, for the switch panel
    this.filter.addEventListener("change", () => {
      this.offset = 0;
      this.load();
    });
    this.prev.addEventListener("click", () => this.turn(-1));
    this.next.addEventListener("click", () => this.turn(1));
    this.armed = new Map(); // job id -> timer: the first click on cancel arms it
    this.queueTimer = null;
    setInterval(() => this.tickClocks(), 1000);
  }

  turn(direction) {
    this.offset = Math.max(0, this.offset + direction * PAGE_SIZE);
    this.load();
  }

  async load() {
    if (!token.get()) {
      this.offset = 0;
      this.pageIds = new Set();
      this.queued = null;
      store.forgetTenant();
      return;
    }
    try {
      let page = await api.jobs({ state: this.filter.value, limit: PAGE_SIZE, offset: this.offset });
      if (page.total > 0 && this.offset >= page.total) {
        // The page emptied (jobs ended and the filter hides them): show the last one instead.
        this.offset = Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE;
        page = await api.jobs({ state: this.filter.value, limit: PAGE_SIZE, offset: this.offset });
      }
      this.pageIds = new Set(page.items.map((job) => job.id));
      this.pageOffset = this.offset;
      store.setJobs(page.items, page.total);
    } catch (error) {
      this.notify(`Could not list jobs (${error.message}). Check the tenant token.`, "error");
    }
    this.loadQueued();
    this.loadLimits();
  }

  // What the tenant may do (its priority classes above all: higher ones are an admin's grant),
  // read once per token.
  async loadLimits() {
    const current = token.get();
    if (current === this.limitsOf) return;
    this.limitsOf = current;
    this.limitsLine.hidden = true;
    if (!current) return;
    try {
      const l = await api.limits();
      this.limitsLine.textContent =
        `Tenant ${l.tenant} may use priority classes 0–${l.max_priority_class}, ` +
        `${count(l.max_jobs)} jobs admitted at once, ${Math.round(l.aggregator_share * 100)}% ` +
        `of the aggregators, and submit ${l.submit_rate} jobs/s (bursts of ${count(l.submit_burst)}).`;
      this.limitsLine.hidden = false;
    } catch {
      this.limitsOf = null; // the jobs table already reported the error; try again next load
    }
  }

  // The tenant's queued jobs and why they wait, shown beside the switch memory: memory can
  // look free while jobs wait (every switch job id taken, partitions reserved but idle).
  async loadQueued() {
    if (!token.get()) return;
    try {
      this.queued = await api.queue();
    } catch {
      this.queued = null; // the jobs table already reported the error
    }
    this.renderQueue();
  }

  // A job event while jobs wait, or of a job that waits: the queue or a reason may have
  // changed, so look at the queue again.
  noteState(job) {
    if (job.state === "queued" || (this.queued && this.queued.total > 0)) this.queueChanged();
  }

  // At most one look every 2 s.
  queueChanged() {
    if (this.queueTimer) return;
    this.queueTimer = setTimeout(() => {
      this.queueTimer = null;
      this.loadQueued();
    }, 2000);
  }

  renderQueue() {
    const q = this.queued;
    if (!q || !q.total) {
      this.queueBox.hidden = true;
      this.queueBox.replaceChildren();
      return;
    }
    // Every queued job is counted under its reason, most common first (the service groups them).
    const shown = q.reasons.slice(0, QUEUE_REASONS_SHOWN);
    const rest = q.reasons.slice(QUEUE_REASONS_SHOWN);
    const restJobs = rest.reduce((n, g) => n + g.jobs, 0);
    const noun = q.total === 1 ? "jobs waits" : "jobs wait";
    this.queueBox.replaceChildren(
      el("strong", {}, `${count(q.total)} of your ${noun}:`),
      el(
        "ul",
        {},
        shown.map((g) =>
          el(
            "li",
            { dataset: { kind: g.kind } },
            el("span", { class: "queue-count" }, `${count(g.jobs)} ${g.jobs === 1 ? "job" : "jobs"}: `),
            g.message,
            hint(g.kind),
          ),
        ),
        rest.length
          ? el("li", { class: "muted" }, `${count(restJobs)} ${restJobs === 1 ? "job waits" : "jobs wait"} for ${count(rest.length)} other reasons`)
          : null,
      ),
    );
    this.queueBox.hidden = false;
  }

  visibleJobs() {
    const wanted = this.filter.value;
    return [...store.jobs.values()]
      .filter((job) => this.pageIds.has(job.id) && (!wanted || job.state === wanted))
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
    this.empty.replaceChildren(...this.emptyText());
    this.renderPager();
    if (!token.get()) {
      this.queued = null; // the token was forgotten: its queue is not this page's any more
      this.renderQueue();
      this.limitsOf = null;
      this.limitsLine.hidden = true;
    }
  }

  emptyText() {
    if (!token.get()) return ["Enter your tenant token (top right) to see and cancel your jobs."];
    const state = this.filter.value;
    if (state) return [`None of your jobs is ${state}.`];
    return ["You have no jobs yet. Submit one with ", el("code", {}, "inasched jobs submit"), " or POST /jobs."];
  }

  renderPager() {
    const total = store.jobsTotal;
    if (total === null) {
      this.total.textContent = "";
      this.pager.hidden = true;
      return;
    }
    const state = this.filter.value;
    this.total.textContent = `${count(total)} ${state ? `${state} ` : ""}job${total === 1 ? "" : "s"}`;
    // The range of the rows shown: a render while the next page loads keeps the last one's.
    const first = Math.min(total, this.pageOffset + 1);
    const last = Math.min(total, this.pageOffset + this.pageIds.size);
    this.range.textContent = total ? `${count(first)}–${count(last)} of ${count(total)}` : "";
    this.prev.disabled = this.offset === 0;
    this.next.disabled = this.offset + PAGE_SIZE >= total;
    this.pager.hidden = total <= PAGE_SIZE && this.offset === 0;
  }

  updateJob(id) {
    const job = store.jobs.get(id);
    const row = this.body.querySelector(`tr[data-job-id="${id}"]`);
    if (!job || !this.pageIds.has(id)) return;
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
        el("td", { class: "state-cell" }, el("span", { class: "state" }), el("span", { class: "why" })),
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
    const why = whyText(job);
    const $ = (selector) => row.querySelector(selector);
    row.dataset.state = job.state;
    $("td.name a").textContent = `#${job.id} ${job.name || ""}`;
    $("td.name a").title = `#${job.id} ${job.name || ""}`;
    $("span.state").className = `state state-${job.state}`;
    $("span.state").textContent = job.state;
    $("span.why").className = `why why-${job.state}`;
    $("span.why").textContent = why || "";
    $("span.why").title = why || "";
    $("span.why").hidden = !why;
    $("td.policy").textContent = job.policy || "–";
    $("td.prio").textContent = job.priority_level ?? "–";
    $("td.progress .fill").style.width = `${(fraction * 100).toFixed(1)}%`;
    $(".progress-text").textContent = `${done} / ${total}`;
    $("td.clock").title = clock.note || clock.label;
    $("td.clock").textContent = clockText(clock);
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
      if (!job) continue;
      const clock = jobClock(job);
      if (!clock.ticking) continue;
      const cell = row.querySelector("td.clock");
      if (cell) cell.textContent = clockText(clock);
    }
  }
}

// What a queue reason means for the memory shown beside it.
function hint(kind) {
  const text = {
    switch_job_ids: "Every admitted job holds a switch job id, even one still waiting for its workers and holding no aggregator.",
    partition: "A static job reserves its partition from admission on, even while the heatmap shows it free.",
    scheduling: "The scheduler looks at it in its next decision round.",
    tenant_quota: "Your tenant's limits (admitted jobs, share of the aggregators) hold it; an admin sets them per tenant.",
    ps_unavailable: "Its parameter server does not answer the service; it is admitted once the PS does, and holds nothing meanwhile.",
  }[kind];
  return text ? el("span", { class: "hint" }, text) : null;
}
