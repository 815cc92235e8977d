// Topics: every topic in the cluster with its depth, its channels' backlog, message count and a
// live rate chart; with lookupd, a switch that also lists the inactive topics (known to
// nsqlookupd, produced by no nsqd) with their channels.

import { api } from "../api.js";
import { h, render } from "../dom.js";
import { config } from "../config.js";
import { RateTracker, sparkline } from "../chart.js";
import { commafy } from "../format.js";
import { badge, channelPath, empty, link, memDisk, num, pausedBadge, topicPath } from "./common.js";

// The switch's state, kept while the app runs (leaving the page and coming back keeps it).
let showInactive = false;

export function mount(root, _params, ctx) {
  document.title = "Topics · nsqadmin";
  const rates = new RateTracker();
  const sub = h("span.sub", { testid: "page-sub" });
  const body = h("div", { testid: "topics-body" });
  const inactiveBody = h("div", { testid: "inactive-body" });
  const head = h("div.page-head", h("h1", { testid: "page-title" }, "Topics"), sub);
  // Inactive topics come from nsqlookupd: nothing to show in --nsqd-http-address mode.
  const lookupd = config.nsqlookupd.length > 0;
  if (lookupd) head.append(inactiveSwitch(ctx));
  root.append(head, body, inactiveBody);

  let seeded = false;
  ctx.poll(async () => {
    const [data, inactive, history] = await Promise.all([
      api.get("/topics?stats=true"),
      lookupd && showInactive ? api.get("/topics?inactive=true") : null,
      // The rows' charts open on nsqadmin's history (once; polls extend them).
      seeded ? null : api.get("/history").catch(() => null),
    ]);
    if (history && history.topics) {
      for (const [name, past] of Object.entries(history.topics)) rates.seed(`topic:${name}`, past);
    }
    seeded = true;
    render(inactiveBody, inactive ? inactiveTopics(inactive) : null);
    const now = performance.now();
    const topics = [...(data.topics || [])].sort();
    const stats = data.stats || null;
    render(sub, topics.length === 1 ? "1 topic" : `${commafy(topics.length)} topics`);
    if (!topics.length) {
      render(body, empty("No topics found. Topics appear when something publishes to an nsqd, or create one on the Lookup page.", "no-topics"));
      return data;
    }
    const total = { depth: 0, channel_depth: 0, memory_depth: 0, backend_depth: 0, message_count: 0, in_flight_count: 0 };
    const rows = topics.map((name) => {
      const s = (stats && stats[name]) || null;
      const series = s ? rates.observe(`topic:${name}`, s.message_count, now) : rates.get(`topic:${name}`);
      if (s) for (const k of Object.keys(total)) total[k] += Number(s[k] || 0);
      return h(
        "tr",
        { testid: "topic-row", data: { topic: name, key: name } },
        h("td.name", link(topicPath(name), name, { testid: "topic-link" }), " ", pausedBadge(s && s.paused)),
        h("td.chart", sparkline(series.points, { title: `${name} msgs/s` })),
        s ? num(s.depth, "topic-depth") : h("td.num.muted", { testid: "topic-depth" }, "–"),
        s ? num(s.channel_depth, "topic-backlog") : h("td.num.muted", { testid: "topic-backlog" }, "–"),
        s ? memDisk(s) : h("td.num.muted", "–"),
        s ? num(s.in_flight_count, "topic-in-flight") : h("td.num.muted", "–"),
        s ? num(s.message_count, "topic-messages") : h("td.num.muted", { testid: "topic-messages" }, "–"),
        s ? num(s.channel_count, "topic-channels") : h("td.num.muted", "–"),
        s ? num(s.node_count, "topic-nodes") : h("td.num.muted", "–"),
      );
    });
    const totalSeries = rates.observe("total", stats ? total.message_count : null, now);
    const table = h(
      "table.grid",
      { testid: "topics-table" },
      h(
        "thead",
        h(
          "tr",
          h("th", "Topic"),
          h("th", { title: "messages published per second, from message_count between polls" }, "Rate (msgs/s)"),
          h("th.num", { title: "messages in the topic, not yet copied to its channels" }, "Depth"),
          h("th.num", { title: "messages queued in the topic's channels, summed over them" }, "Channel backlog"),
          h("th.num", "Memory + Disk"),
          h("th.num", { title: "messages sent to consumers and not yet finished, over all channels" }, "In flight"),
          h("th.num", "Messages"),
          h("th.num", "Channels"),
          h("th.num", "Nodes"),
        ),
      ),
      h("tbody", rows),
      stats
        ? h(
            "tfoot",
            h(
              "tr.total",
              { testid: "topics-total" },
              h("td", "Total"),
              h("td.chart", sparkline(totalSeries.points, { testid: "total-rate-chart", title: "all topics msgs/s" })),
              num(total.depth, "total-depth"),
              num(total.channel_depth, "total-backlog"),
              memDisk(total, "total-mem-disk"),
              num(total.in_flight_count),
              num(total.message_count, "total-messages"),
              h("td"),
              h("td"),
            ),
          )
        : null,
    );
    render(
      body,
      table,
      stats ? null : h("p.muted", "This nsqadmin does not report per-topic numbers; open a topic for its details."),
    );
    return data;
  });
}


function inactiveSwitch(ctx) {
  const box = h("input", { type: "checkbox", testid: "show-inactive" });
  box.checked = showInactive;
  box.addEventListener("change", () => {
    showInactive = box.checked;
    ctx.refresh();
  });
  return h(
    "label.switch",
    { title: "also list the topics nsqlookupd knows that no nsqd produces, with their channels" },
    box,
    "Show inactive topics",
  );
}

// /api/topics?inactive=true: {"topics": {"<topic>": ["<channel>", ...]}}
function inactiveTopics(answer) {
  const map = answer.topics && !Array.isArray(answer.topics) ? answer.topics : {};
  const names = Object.keys(map).sort();
  const title = h("h2", { testid: "inactive-title" }, `Inactive topics (${names.length})`);
  if (!names.length) return [title, empty("Every topic nsqlookupd knows has a producer.", "no-inactive")];
  return [
    title,
    h(
      "table.grid",
      { testid: "inactive-topics" },
      h("thead", h("tr", h("th", "Topic"), h("th", "Channels"))),
      h(
        "tbody",
        names.map((t) => {
          const channels = [...(map[t] || [])].sort();
          return h(
            "tr",
            { testid: "inactive-topic", data: { topic: t, key: t } },
            h(
              "td.name",
              link(topicPath(t), t, { testid: "topic-link" }),
              " ",
              badge("no producer", "warn", { title: "known to nsqlookupd, produced by no nsqd" }),
            ),
            h(
              "td",
              channels.length
                ? channels.map((c) => link(channelPath(t, c), c, { class: "chip", testid: "inactive-channel", data: { channel: c } }))
                : h("span.muted", "none"),
            ),
          );
        }),
      ),
    ),
  ];
}
