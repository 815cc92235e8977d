// Counter: a large live total of messages processed by every channel in the cluster, its
// rate, and a chart of that rate.

import { api } from "../api.js";
import { h, render } from "../dom.js";
import { config } from "../config.js";
import { RateTracker, sparkline } from "../chart.js";
import { commafy, plural, rate as fmtRate } from "../format.js";

let frame = 0;

export function mount(root, _params, ctx) {
  document.title = "Counter · nsqadmin";
  const rates = new RateTracker(120);
  const total = h("div.counter-total", { testid: "counter-total", data: { total: "" } }, "–");
  const rateLine = h("div.counter-rate", { testid: "counter-rate" }, "measuring…");
  const chart = h("div.counter-chart");
  const detail = h("p.muted.center", { testid: "counter-detail" });
  root.append(
    h(
      "div.counter",
      { testid: "counter" },
      h("div.counter-label", "Messages processed"),
      total,
      rateLine,
      chart,
      detail,
    ),
  );
  let shown = null;

  function animateTo(target) {
    cancelAnimationFrame(frame);
    if (shown === null || target < shown) {
      shown = target;
      total.textContent = commafy(shown);
      return;
    }
    const from = shown;
    const start = performance.now();
    const span = Math.min(config.refreshMs, 1000);
    const step = (t) => {
      const k = Math.min(1, (t - start) / span);
      shown = Math.round(from + (target - from) * k);
      total.textContent = commafy(shown);
      if (k < 1) frame = requestAnimationFrame(step);
    };
    frame = requestAnimationFrame(step);
  }

  ctx.poll(async () => {
    const data = await api.get("/counter");
    const stats = Object.values(data.stats || {});
    const sum = stats.reduce((n, s) => n + Number(s.message_count || 0), 0);
    const series = rates.observe("total", sum, performance.now());
    total.setAttribute("data-total", String(sum));
    animateTo(sum);
    const current = series.points.length ? series.points[series.points.length - 1] : null;
    render(rateLine, current === null ? "measuring…" : `${fmtRate(current)} right now`);
    render(chart, sparkline(series.points, { width: 640, height: 120, testid: "counter-chart", label: false, maxPoints: 120, title: "messages processed per second" }));
    const channels = new Set(stats.map((s) => `${s.topic_name}/${s.channel_name}`));
    const nodes = new Set(stats.map((s) => s.node));
    render(detail, `summed over ${plural(channels.size, "channel")} on ${commafy(nodes.size)} nsqd, updated every ${config.refreshMs / 1000}s`);
    return data;
  });
}

export function unmount() {
  cancelAnimationFrame(frame);
}
