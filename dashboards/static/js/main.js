// Boots the dashboard: the tenant token form, the event stream, and a hash router over the
// three views (#/ live switch + jobs, #/jobs/<id> one job, #/bench benchmark runs).

import { EventStream, token } from "./api.js";
import { store } from "./store.js";
import { Heatmap } from "./heatmap.js";
import { JobsTable } from "./jobs.js";
import { JobDetail } from "./detail.js";
import { BenchView } from "./bench.js";

const $ = (selector) => document.querySelector(selector);

let noticeTimer = null;
function notify(message, level = "info") {
  const box = $("#notice");
  box.textContent = message;
  box.className = `notice ${level}`;
  box.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => {
    box.hidden = true;
  }, level === "error" ? 8000 : 3000);
}

const views = {
  live: $("#view-live"),
  job: $("#view-job"),
  bench: $("#view-bench"),
};
const heatmap = new Heatmap(views.live);
const jobsTable = new JobsTable(views.live, notify);
const detail = new JobDetail(views.job, notify);
const bench = new BenchView(views.bench, notify);
let current = null;

function route() {
  const hash = location.hash || "#/";
  const jobMatch = hash.match(/^#\/jobs\/(\d+)$/);
  const name = jobMatch ? "job" : hash.startsWith("#/bench") ? "bench" : "live";
  for (const [key, node] of Object.entries(views)) node.hidden = key !== name;
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === name || (name === "job" && link.dataset.nav === "live"));
  }
  if (name !== "job") detail.hide();
  if (name === "job") detail.show(Number(jobMatch[1]));
  else if (name === "bench") bench.show();
  else if (current !== "live") {
    jobsTable.load();
    heatmap.schedule();
  }
  current = name;
}

function renderTokenUi() {
  const t = token.get();
  $("#token-form").hidden = Boolean(t);
  $("#token-set").hidden = !t;
  $("#token-label").textContent = t ? `token …${t.slice(-4)}` : "";
}

$("#token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("#token-input").value.trim();
  if (!value) return;
  token.set(value);
  $("#token-input").value = "";
  renderTokenUi();
  jobsTable.load();
  stream.start();
  if (current !== "live") route();
});

$("#token-forget").addEventListener("click", () => {
  token.clear();
  renderTokenUi();
  store.forgetTenant();
  stream.start();
  if (current !== "live") route();
});

store.subscribe((change) => {
  if (change.kind === "switch") {
    if (current === "live") heatmap.schedule();
  } else if (change.kind === "jobs") {
    jobsTable.render();
    heatmap.schedule();
  } else if (change.kind === "job") {
    jobsTable.updateJob(change.id);
  }
});

const checked = new Set(); // ids of jobs not in the tenant's list, already looked up once

const stream = new EventStream(
  {
    switch: (snapshot) => store.setSwitch(snapshot),
    job: (job) => {
      jobsTable.noteState(job);
      // Only the tenant's jobs are listed; others reach the page through the heatmap.
      if (store.ownIds.has(job.id)) store.putJob(job);
      else if (token.get() && !checked.has(job.id)) {
        checked.add(job.id);
        jobsTable.load();
      }
      detail.onJobEvent(job);
    },
    bench: () => {
      if (current === "bench") bench.loadRuns();
    },
  },
  (status) => {
    const badge = $("#stream-status");
    badge.textContent = { live: "live", "no token": "no token" }[status] || "reconnecting…";
    badge.className = `stream-status ${status.replace(" ", "-")}`;
  },
);

renderTokenUi();
window.addEventListener("hashchange", route);
route();
stream.start();
