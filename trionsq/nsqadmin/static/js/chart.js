// Live rates: message_count deltas between polls turned into msgs/s series, drawn as small
// SVG time-series charts (sparklines) with the current value labelled.

import { h } from "./dom.js";
import { config } from "./config.js";
import { rate as fmtRate } from "./format.js";

// Keeps, per key ("topic:foo", "node:host:port", ...), the last count and up to
// config.chartPoints rate points.
export class RateTracker {
  constructor(maxPoints = config.chartPoints) {
    this.maxPoints = maxPoints;
    this.series = new Map();
  }

  // Record a cumulative `count` seen at `now` (ms); returns the series.
  observe(key, count, now = performance.now()) {
    let s = this.series.get(key);
    if (!s) {
      s = { lastCount: null, lastTime: null, points: [] };
      this.series.set(key, s);
    }
    if (count === null || count === undefined || !Number.isFinite(Number(count))) return s;
    count = Number(count);
    if (s.lastCount !== null && now > s.lastTime) {
      const dt = (now - s.lastTime) / 1000;
      // A count going down means a restarted nsqd or a deleted and recreated topic.
      const value = count >= s.lastCount ? (count - s.lastCount) / dt : 0;
      s.points.push(value);
      if (s.points.length > this.maxPoints) s.points.splice(0, s.points.length - this.maxPoints);
    }
    s.lastCount = count;
    s.lastTime = now;
    return s;
  }

  get(key) {
    return this.series.get(key) || { lastCount: null, lastTime: null, points: [] };
  }

  // Start a series that has no points yet on `rates` (from nsqadmin's history), so that its
  // chart opens on the past; the page's own polls append to it.
  seed(key, rates) {
    if (!Array.isArray(rates) || !rates.length) return;
    let s = this.series.get(key);
    if (!s) {
      s = { lastCount: null, lastTime: null, points: [] };
      this.series.set(key, s);
    }
    if (!s.points.length) s.points = rates.slice(-this.maxPoints).map(Number);
  }

  current(key) {
    const p = this.get(key).points;
    return p.length ? p[p.length - 1] : null;
  }
}

// A sparkline of `points` (msgs/s, oldest first) with the latest value as a label.
export function sparkline(points, { width = 84, height = 22, testid = "rate-chart", label = true, title = "", maxPoints = config.chartPoints } = {}) {
  const n = points.length;
  const max = Math.max(1, ...points);
  const pad = 2;
  const step = (width - pad * 2) / Math.max(1, maxPoints - 1);
  // Right-align: the newest point is at the right edge, older ones to the left.
  const x0 = width - pad - (n - 1) * step;
  const y = (v) => (height - pad - (v / max) * (height - pad * 2)).toFixed(1);
  const coords = points.map((v, i) => `${(x0 + i * step).toFixed(1)},${y(v)}`);
  const current = n ? points[n - 1] : null;
  const svgChildren = [
    h("line.chart-base", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad }),
  ];
  if (n >= 2) {
    const area = `${(x0).toFixed(1)},${height - pad} ${coords.join(" ")} ${(x0 + (n - 1) * step).toFixed(1)},${height - pad}`;
    svgChildren.push(h("polygon.chart-area", { points: area }));
    svgChildren.push(h("polyline.chart-line", { points: coords.join(" ") }));
  }
  if (n >= 1) {
    const last = coords[n - 1].split(",");
    svgChildren.push(h("circle.chart-dot", { cx: last[0], cy: last[1], r: 2 }));
  }
  const peak = n ? Math.max(...points) : 0;
  const tip = n ? `${fmtRate(current)} now, peak ${fmtRate(peak)} over the last ${n} polls` : "waiting for a second poll";
  svgChildren.push(h("title", title ? `${title}: ${tip}` : tip));
  const svg = h(
    "svg.spark",
    {
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: "img",
      "aria-label": n ? `rate ${fmtRate(current)}` : "rate: collecting",
      testid,
      data: { points: n, rate: current === null ? "" : current.toFixed(3) },
    },
    svgChildren,
  );
  if (!label) return svg;
  return h(
    "span.rate",
    svg,
    h("span.rate-label", { testid: `${testid}-label` }, n ? fmtRate(current) : "…"),
  );
}

// The last hour of a topic's or channel's rate (msgs/s, the line and area) and depth (the
// dashed line, on its own scale), from nsqadmin's /api/history: `points` are
// [unix seconds, msgs/s, depth], oldest first. Placed by time, so a gap shows as one; the
// axis spans from the oldest point (at least a minute, at most `maxSpan`) to now, so that a
// young nsqadmin's few minutes fill the chart.
export function historyChart(points, { width = 960, height = 130, maxSpan = 3600, now = Date.now() / 1000, testid = "history-chart", source = "nsqadmin" } = {}) {
  const padX = 44;
  const padY = 14;
  const innerW = width - padX * 2;
  const innerH = height - padY * 2;
  const inWindow = points.filter((p) => p[0] >= now - maxSpan);
  const span = inWindow.length ? Math.min(maxSpan, Math.max(60, now - inWindow[0][0])) : maxSpan;
  const start = now - span;
  const shown = inWindow.filter((p) => p[0] >= start);
  const spanText = span >= 120 ? `${Math.round(span / 60)} min` : `${Math.round(span)} s`;
  const peakRate = Math.max(1, ...shown.map((p) => p[1]));
  // One burst (a backlog published at once) would flatten the rest of the hour: above 3x the
  // 95th percentile the scale stops at 1.25x it, and the burst is drawn clipped at the top.
  const sorted = shown.map((p) => p[1]).sort((a, b) => a - b);
  const p95 = sorted.length ? sorted[Math.floor(0.95 * (sorted.length - 1))] : 0;
  const maxRate = peakRate > 3 * p95 && p95 > 0 ? 1.25 * p95 : peakRate;
  const maxDepth = Math.max(1, ...shown.map((p) => p[2]));
  const x = (t) => (padX + ((t - start) / span) * innerW).toFixed(1);
  const yRate = (v) => (padY + innerH - (Math.min(v, maxRate) / maxRate) * innerH).toFixed(1);
  const yDepth = (v) => (padY + innerH - (v / maxDepth) * innerH).toFixed(1);
  const children = [
    h("line.chart-base", { x1: padX, y1: padY + innerH, x2: width - padX, y2: padY + innerH }),
    h("text.axis", { x: padX, y: height - 2, "text-anchor": "start" }, `${spanText} ago`),
    h("text.axis", { x: width - padX, y: height - 2, "text-anchor": "end" }, "now"),
    h("text.axis.rate-axis", { x: padX - 4, y: padY + 4, "text-anchor": "end" }, fmtRate(maxRate)),
    h("text.axis.depth-axis", { x: width - padX + 4, y: padY + 4, "text-anchor": "start" }, String(Math.round(maxDepth))),
  ];
  if (shown.length >= 2) {
    const rate = shown.map((p) => `${x(p[0])},${yRate(p[1])}`);
    const first = x(shown[0][0]);
    const last = x(shown[shown.length - 1][0]);
    children.push(h("polygon.chart-area", { points: `${first},${padY + innerH} ${rate.join(" ")} ${last},${padY + innerH}` }));
    children.push(h("polyline.chart-line", { points: rate.join(" ") }));
    children.push(h("polyline.chart-depth", { points: shown.map((p) => `${x(p[0])},${yDepth(p[2])}`).join(" ") }));
  }
  const latest = shown.length ? shown[shown.length - 1] : null;
  const tip = latest
    ? `${fmtRate(latest[1])} now, depth ${latest[2]}; peak ${fmtRate(peakRate)} over the last ${spanText} (${source})`
    : "no history yet: nsqadmin samples the cluster from when it starts";
  children.push(h("title", tip));
  return h(
    "figure.history",
    h(
      "svg.history-svg",
      { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": tip, testid, data: { points: shown.length, source } },
      children,
    ),
    h(
      "figcaption",
      h("span.legend-rate", "msgs/s"),
      " and ",
      h("span.legend-depth", "depth"),
      latest
        ? `, last ${spanText}: ${fmtRate(latest[1])} now, depth ${latest[2]}` +
            (peakRate > maxRate ? `; peak ${fmtRate(peakRate)} (clipped)` : "")
        : ", last hour: collecting",
    ),
  );
}
