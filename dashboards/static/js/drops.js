// What the switch's drop counters mean: a drop is a packet the switch discarded without
// touching its memory, counted by reason (p4/PROTOCOL.md, section 4). Some reasons are the
// normal end of a job's traffic; the others mean a sender is misconfigured.

import { count, el, packets } from "./format.js";

// reason -> [expected, what it means]. Expected drops are not counted as alarming.
const REASONS = {
  unknown_job: [
    true,
    "a packet for a job the switch no longer holds: late packets (in flight or resent) of a job that finished or was cancelled. With no job ended, a worker uses a wrong job id.",
  ],
  stale: [true, "a static job's late resend to a slot that already holds a newer fragment"],
  injected_loss: [true, "dropped on purpose by the soft switch's --drop-rate"],
  bad_length: [false, "not a whole packet of the aggregation protocol"],
  bad_version: [false, "another protocol version: a worker or PS of another inasched release"],
  bad_kind: [false, "a message kind its sender may not send"],
  bad_lanes: [false, "a lane count other than the switch's"],
  bad_worker: [false, "a worker id outside the job's fan-in, or a fan-in other than the job's"],
  bad_bitmap: [false, "a contributor bitmap other than the sender's own bit"],
  unregistered_source: [false, "from an address not registered for the job (a worker that did not join from it)"],
  bad_agg_index: [false, "an aggregator index outside the job's partition or pool"],
};

// `drops` is the snapshot's counters.drops: {reason: packets or {packets, bytes}}.
// Returns {alarming, expected, rows: [{reason, packets, expected, meaning}]}, alarming first.
export function dropCensus(drops) {
  const rows = Object.entries(drops || {})
    .map(([reason, value]) => {
      const [expected, meaning] = REASONS[reason] || [false, "a reason this page does not know"];
      return { reason, packets: packets(value), expected, meaning };
    })
    .filter((row) => row.packets > 0)
    .sort((a, b) => a.expected - b.expected || b.packets - a.packets);
  const sum = (expected) => rows.filter((r) => r.expected === expected).reduce((n, r) => n + r.packets, 0);
  return { alarming: sum(false), expected: sum(true), rows };
}

// The line under the counters and, opened, the per-reason table.
export function renderDropDetail(details, census) {
  const { alarming, expected, rows } = census;
  const parts = [];
  if (alarming) parts.push(`${count(alarming)} ${alarming === 1 ? "drop needs" : "drops need"} a look`);
  if (expected) parts.push(`${count(expected)} late ${expected === 1 ? "packet" : "packets"} of ended jobs and resends (harmless)`);
  const summary = `Drops: ${parts.length ? parts.join(" · ") : "none"}`;
  details.dataset.alarming = alarming;
  details.dataset.expected = expected;
  details.classList.toggle("alarm", alarming > 0);
  const head = details.querySelector("summary");
  if (head.textContent !== summary) head.textContent = summary;
  const key = JSON.stringify(rows);
  if (details.dataset.rows === key) return; // unchanged: keep the open table still
  details.dataset.rows = key;
  const body =
    details.querySelector(".drops-body") || details.appendChild(el("div", { class: "drops-body" }));
  body.replaceChildren(
    el(
      "p",
      {},
      "A drop is a packet the switch discarded without touching its memory. The drops counter above counts only the ones that point at a misconfigured sender; late packets of finished or cancelled jobs are expected.",
    ),
    rows.length
      ? el(
          "table",
          { class: "drops-table" },
          el("thead", {}, el("tr", {}, el("th", {}, "reason"), el("th", {}, "packets"), el("th", {}, "meaning"))),
          el(
            "tbody",
            {},
            rows.map((r) =>
              el(
                "tr",
                { dataset: { reason: r.reason, expected: r.expected } },
                el("td", {}, el("code", {}, r.reason)),
                el("td", { class: "num" }, count(r.packets)),
                el("td", {}, r.expected ? `${r.meaning} (harmless)` : r.meaning),
              ),
            ),
          ),
        )
      : el("p", { class: "muted" }, "No packet has been dropped."),
    el(
      "p",
      { class: "muted" },
      "The same counts, for monitoring: ",
      el("a", { href: "/metrics", target: "_blank", rel: "noopener" }, "/metrics"),
      " (",
      el("code", {}, "inasched_switch_drops_total{reason}"),
      ").",
    ),
  );
}
