// Formatting helpers and the job colour scheme shared by every view.

// Golden-angle hues keep consecutive job ids far apart on the colour wheel.
export function jobHue(jobId) {
  return (Number(jobId) * 137.508) % 360;
}

// [r, g, b] of a job's colour; `shade` picks how an aggregator's state is drawn:
// "complete" is the full colour, "partial" is mixed with white, "flushed" with black.
export function jobRgb(jobId, shade = "complete") {
  return shadeRgb(hslToRgb(jobHue(jobId), 0.68, 0.47), shade);
}

export function shadeRgb(rgb, shade) {
  if (shade === "partial") return rgb.map((c) => Math.round(c + (255 - c) * 0.55));
  if (shade === "flushed") return rgb.map((c) => Math.round(c * 0.45));
  return rgb;
}

export function rgbCss([r, g, b]) {
  return `rgb(${r}, ${g}, ${b})`;
}

export const FREE_RGB = [226, 230, 236];

function hslToRgb(h, s, l) {
  const a = s * Math.min(l, 1 - l);
  const f = (n) => {
    const k = (n + h / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

// Timestamps arrive as ISO strings (naive ones are UTC, as SQLite stores them) or epoch seconds.
export function parseTime(value) {
  if (value === null || value === undefined || value === "") return null;
  if (typeof value === "number") return value * 1000;
  const s = String(value);
  const zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(s) ? s : `${s}Z`;
  const ms = Date.parse(zoned);
  return Number.isNaN(ms) ? null : ms;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.max(0, seconds);
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} m`;
}

export function bytes(n) {
  if (!Number.isFinite(n)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1000 && u < units.length - 1) {
    v /= 1000;
    u += 1;
  }
  return `${v.toFixed(v < 10 && u > 0 ? 1 : 0)} ${units[u]}`;
}

export function count(n) {
  if (!Number.isFinite(n)) return "–";
  return n.toLocaleString("en-US");
}

export function pct(fraction) {
  if (!Number.isFinite(fraction)) return "–";
  return `${Math.round(fraction * 100)}%`;
}

// A counter value is a number, or {packets, bytes} where a target counts both.
export function packets(value) {
  if (typeof value === "number") return value;
  if (value && typeof value === "object") return Number(value.packets ?? 0);
  return 0;
}

export const ENDED_STATES = new Set(["finished", "cancelled", "failed"]);

// What a job's clock shows: its JCT once it ended, the time it has run since all its workers
// joined, or the time it has waited in the queue. An admitted job whose workers have not all
// joined has not started: its clock stands still (`seconds` null) until they do.
export function jobClock(job, nowMs = Date.now()) {
  if (ENDED_STATES.has(job.state)) {
    if (Number.isFinite(job.jct_s)) return { label: "JCT", seconds: job.jct_s };
    const start = parseTime(job.started_at) ?? parseTime(job.submitted_at);
    const end = parseTime(job.finished_at);
    return { label: "ran", seconds: start && end ? (end - start) / 1000 : null };
  }
  const started = parseTime(job.started_at);
  if (started) return { label: "elapsed", seconds: (nowMs - started) / 1000, ticking: true };
  if (job.state === "queued") {
    const submitted = parseTime(job.submitted_at);
    return { label: "queued", seconds: submitted ? (nowMs - submitted) / 1000 : null, ticking: true };
  }
  return { label: "not started", seconds: null, note: "waiting for its workers to join" };
}

// A clock as one short cell: "JCT 1 m 02 s", "queued 12 s", "4.2 s", "not started".
export function clockText(clock) {
  if (clock.seconds === null && clock.note) return clock.label;
  const value = duration(clock.seconds);
  return clock.label === "elapsed" ? value : `${clock.label} ${value}`;
}

// Why a job is where it is, in words, or null: why it failed, was cancelled or waits.
export function whyText(job) {
  if (job.state === "queued") {
    return (job.queue_reason && job.queue_reason.message) || job.reason || "waiting for the scheduler";
  }
  if (job.state === "failed") return job.reason || "no reason was recorded";
  if (job.state === "cancelled") return job.reason || null;
  if (job.state === "admitted" && !job.started_at) return "waiting for its workers to join";
  if (job.overran_declaration) return "over-ran its declared iterations: ranked by attained service";
  return null;
}

export function switchShare(job) {
  const sw = Number(job.bytes_switch ?? 0);
  const ps = Number(job.bytes_ps ?? 0);
  return sw + ps > 0 ? sw / (sw + ps) : null;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// ImageData is RGBA bytes; on little-endian machines (all browsers in practice) a Uint32 is ABGR.
export function pack([r, g, b]) {
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
}
