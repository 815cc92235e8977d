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
