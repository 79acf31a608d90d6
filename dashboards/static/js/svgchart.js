// A small SVG line chart: axes with round ticks, one path per series, optional step lines.

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

// Round tick values covering [lo, hi]: 1, 2 or 5 times a power of ten apart.
export function ticks(lo, hi, target = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}

// Ticks of a log axis over [lo, hi] (both > 0): each power of ten, and 2 and 5 times it when
// the axis spans at most two decades.
export function logTicks(lo, hi) {
  const first = Math.floor(Math.log10(lo));
  const last = Math.ceil(Math.log10(hi));
  const multiples = last - first <= 2 ? [1, 2, 5] : [1];
  const out = [];
  for (let e = first; e <= last; e += 1) {
    for (const m of multiples) {
      const v = m * 10 ** e;
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push(v);
    }
  }
  return out;
}

/**
 * series: [{name, color, points: [[x, y], ...], step?: boolean, dash?: SVG stroke-dasharray}]
 * options: {width, height, xLabel, yLabel, xMin, xMax, yMin, yMax, xFormat, yFormat, legend,
 *   yWhole (only whole-number ticks on the y axis: levels, counts), xLog (a log x axis; points
 *   at or below xMin are drawn at xMin)}
 */
export function lineChart(series, options = {}) {
  const width = options.width || 520;
  const height = options.height || 220;
  const m = { top: 12, right: options.legend ? 86 : 14, bottom: 38, left: 52 };
  const all = series.flatMap((s) => s.points);
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  const positive = xs.filter((x) => x > 0);
  let xMin = options.xMin ?? (options.xLog ? (positive.length ? Math.min(...positive) : 1) : xs.length ? Math.min(...xs) : 0);
  let xMax = options.xMax ?? (xs.length ? Math.max(...xs) : 1);
  let yMin = options.yMin ?? (ys.length ? Math.min(0, ...ys) : 0);
  let yMax = options.yMax ?? (ys.length ? Math.max(...ys) : 1);
  if (xMax <= xMin) xMax = options.xLog ? xMin * 10 : xMin + 1;
  if (yMax <= yMin) yMax = yMin + 1;
  const xFormat = options.xFormat || ((v) => String(v));
  const yFormat = options.yFormat || ((v) => String(v));
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const fx = options.xLog ? (x) => Math.log10(Math.max(x, xMin)) : (x) => x;
  const sx = (x) => m.left + ((fx(x) - fx(xMin)) / (fx(xMax) - fx(xMin))) * pw;
  const sy = (y) => m.top + ph - ((y - yMin) / (yMax - yMin)) * ph;

  const root = svg("svg", {
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    class: "chart",
    "data-x-scale": options.xLog ? "log" : "linear",
    role: "img",
    "aria-label": options.title || "chart",
  });
  const axes = svg("g", { class: "axes" });
  for (const t of options.xLog ? logTicks(xMin, xMax) : ticks(xMin, xMax)) {
    axes.append(svg("line", { x1: sx(t), x2: sx(t), y1: m.top, y2: m.top + ph, class: "grid" }));
    axes.append(svg("text", { x: sx(t), y: m.top + ph + 14, "text-anchor": "middle" }, xFormat(t)));
  }
  for (const t of ticks(yMin, yMax, 4).filter((v) => !options.yWhole || Number.isInteger(v))) {
    axes.append(svg("line", { x1: m.left, x2: m.left + pw, y1: sy(t), y2: sy(t), class: "grid" }));
    axes.append(svg("text", { x: m.left - 6, y: sy(t) + 4, "text-anchor": "end" }, yFormat(t)));
  }
  axes.append(svg("rect", { x: m.left, y: m.top, width: pw, height: ph, class: "frame" }));
  if (options.xLabel) {
    axes.append(svg("text", { x: m.left + pw / 2, y: height - 4, "text-anchor": "middle", class: "label" }, options.xLabel));
  }
  if (options.yLabel) {
    axes.append(
      svg("text", { x: 12, y: m.top + ph / 2, transform: `rotate(-90 12 ${m.top + ph / 2})`, "text-anchor": "middle", class: "label" }, options.yLabel),
    );
  }
  root.append(axes);

  for (const s of series) {
    if (!s.points.length) continue;
    let d = "";
    s.points.forEach(([x, y], i) => {
      if (i === 0) d += `M${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
      else if (s.step) d += `H${sx(x).toFixed(1)}V${sy(y).toFixed(1)}`;
      else d += `L${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
    });
    if (s.step && s.extendTo !== undefined) d += `H${sx(s.extendTo).toFixed(1)}`;
    const style = s.dash ? { "stroke-dasharray": s.dash } : {};
    root.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, ...style, class: "series", "data-series": s.name }));
  }

  if (options.legend && series.length) {
    const g = svg("g", { class: "chart-legend" });
    series.forEach((s, i) => {
      const y = m.top + 10 + i * 16;
      const x = m.left + pw + 10;
      const style = s.dash ? { "stroke-dasharray": s.dash } : {};
      g.append(svg("line", { x1: x, x2: x + 22, y1: y - 4, y2: y - 4, stroke: s.color, "stroke-width": 3, ...style }));
      g.append(svg("text", { x: x + 28, y }, s.name));
    });
    root.append(g);
  }
  return root;
}
