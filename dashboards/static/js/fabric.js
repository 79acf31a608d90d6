// On a fabric (`/switch` lists `switches`): one small heatmap per switch, in the topology
// file's order, each cell an aggregator of that switch coloured by job and shaded by state as
// in the main heatmap, with the switch's use and, for a lost switch, why it is lost.

import { FREE_RGB, count, el, jobRgb, pack } from "./format.js";

const STATES = { 1: "partial", 2: "complete", 3: "flushed" };
const HEIGHT = 90; // px per switch: the fabric's maps stay below the main one on one screen

export class FabricHeatmaps {
  constructor(root) {
    this.root = root;
  }

  render(snap) {
    const switches = (snap && snap.switches) || [];
    this.root.hidden = switches.length === 0;
    this.root.replaceChildren(...switches.map((one) => this.panel(one)));
  }

  panel(one) {
    const used = (one.runs || []).reduce((sum, run) => sum + run[1], 0);
    const state = one.lost
      ? `lost: ${one.lost}`
      : one.unavailable
        ? `occupancy unknown: ${one.unavailable}`
        : `${count(used)} / ${count(one.aggregators)} aggregators in use`;
    const canvas = el("canvas", { "aria-label": `aggregator heatmap of switch ${one.name}` });
    Object.assign(canvas.dataset, { switch: one.name, aggregators: one.aggregators, used });
    const box = el(
      "div",
      { class: one.lost ? "fabric-switch lost" : "fabric-switch" },
      el("div", { class: "fabric-head" }, el("strong", {}, one.name), ` ${one.data} · ${state}`),
      canvas,
    );
    if (!one.lost && !one.unavailable) requestAnimationFrame(() => draw(canvas, one));
    return box;
  }
}

function draw(canvas, one) {
  const n = one.aggregators;
  const width = Math.max(200, Math.floor(canvas.parentElement.clientWidth));
  const cell = Math.max(1, Math.floor(Math.sqrt((width * HEIGHT) / n)));
  const cols = Math.max(1, Math.floor(width / cell));
  const rows = Math.ceil(n / cols);
  const image = new ImageData(cols, rows);
  const px = new Uint32Array(image.data.buffer);
  px.fill(pack([250, 250, 250]));
  px.fill(pack(FREE_RGB), 0, n);
  for (const [start, length, jobId, state] of one.runs || []) {
    px.fill(pack(jobRgb(jobId, STATES[state] || "complete")), start, Math.min(n, start + length));
  }
  const bitmap = document.createElement("canvas");
  bitmap.width = cols;
  bitmap.height = rows;
  bitmap.getContext("2d").putImageData(image, 0, 0);
  canvas.width = cols * cell;
  canvas.height = rows * cell;
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(bitmap, 0, 0, cols * cell, rows * cell);
}
