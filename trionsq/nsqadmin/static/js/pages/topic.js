// A topic: its numbers per nsqd (depth in memory and on disk, in flight, deferred, requeued,
// timed out, messages, e2e latency, live rate), its channels, and the topic actions.

import { api, isNotFound } from "../api.js";
import { h, render } from "../dom.js";
import { config, enc } from "../config.js";
import { RateTracker, sparkline } from "../chart.js";
import { commafy } from "../format.js";
import { runAction } from "../actions.js";
import { unansweredMap } from "../banners.js";
import {
  actionBar,
  encNode,
  channelPath,
  e2eCells,
  e2eHeaders,
  empty,
  link,
  memDisk,
  nodePath,
  notAnsweringBadge,
  num,
  pausedBadge,
  quantiles,
  sumChannels,
  tombstoneButton,
} from "./common.js";

let topic = "";

export function mount(root, params, ctx) {
  topic = params.topic;
  document.title = `${topic} · nsqadmin`;
  const rates = new RateTracker();
  const title = h("h1", { testid: "page-title" }, h("span.kind", "Topic "), topic);
  const actions = h("div");
  const body = h("div", { testid: "topic-body" });
  root.append(
    h("nav.crumbs", link("/topics", "Topics"), h("span", "›"), h("span", topic)),
    h("div.page-head", title, actions),
    body,
  );

  ctx.poll(async () => {
    let data;
    try {
      data = await api.get(`/topics/${enc(topic)}`);
    } catch (err) {
      if (isNotFound(err)) {
        render(actions);
        render(body, empty(`Topic ${topic} does not exist on any nsqd.`, "not-found"));
        return {};
      }
      throw err;
    }
    const now = performance.now();
    const down = unansweredMap(data.errors);
    const nodes = data.nodes || [];
    const channels = [...(data.channels || [])].sort((a, b) => a.channel_name.localeCompare(b.channel_name));
    render(title, h("span.kind", "Topic "), topic, " ", pausedBadge(data.paused));
    render(
      actions,
      nodes.length
        ? actionBar([
            data.paused
              ? { action: "unpause", label: "Unpause topic", kind: "ok" }
              : { action: "pause", label: "Pause topic", kind: "primary" },
            { action: "empty", label: "Empty topic", kind: "warn" },
            { action: "delete", label: "Delete topic", kind: "danger" },
          ])
        : null,
    );

    const qs = quantiles(data.e2e_processing_latency, ...nodes.map((n) => n.e2e_processing_latency));
    const totalSeries = rates.observe("topic", data.message_count, now);
    const nodeRows = nodes.map((n) => {
      const series = rates.observe(`node:${n.node}`, n.message_count, now);
      return h(
        "tr",
        { testid: "node-row", data: { node: n.node, key: n.node } },
        h(
          "td.name",
          link(nodePath(n.node), n.node, { testid: "node-link" }),
          n.hostname && n.hostname !== n.node ? h("span.host", n.hostname) : null,
          " ",
          pausedBadge(n.paused),
        ),
        h("td.chart", sparkline(series.points, { title: `${n.node} msgs/s` })),
        num(n.depth, "depth"),
        memDisk(n),
        num(sumChannels(n.channels, "in_flight_count"), "in-flight"),
        num(sumChannels(n.channels, "deferred_count"), "deferred"),
        num(sumChannels(n.channels, "requeue_count"), "requeued"),
        num(sumChannels(n.channels, "timeout_count"), "timed-out"),
        num(n.message_count, "messages"),
        num((n.channels || []).length, "channels"),
        ...e2eCells(n.e2e_processing_latency, qs),
        h("td.row-actions", tombstoneButton(topic, n.node)),
      );
    });
    const shown = new Set(nodes.map((n) => n.node));
    for (const [address, error] of down) {
      if (shown.has(address) || config.nsqlookupd.includes(address)) continue;
      nodeRows.push(
        h(
          "tr.down",
          { testid: "node-row", data: { node: address, key: address, down: "true" } },
          h("td.name", link(nodePath(address), address)),
          h("td.muted", { colspan: 9 + qs.length }, notAnsweringBadge(error), ` ${error}`),
          h("td"),
        ),
      );
    }
    const allCh = nodes.flatMap((n) => n.channels || []);
    const nodeTable = h(
      "table.grid",
      { testid: "topic-nodes" },
      h(
        "thead",
        qs.length ? h("tr.group", h("th", { colspan: 10 }), h("th.center", { colspan: qs.length }, "E2E processing latency"), h("th")) : null,
        h(
          "tr",
          h("th", "nsqd"),
          h("th", "Rate (msgs/s)"),
          h("th.num", "Depth"),
          h("th.num", "Memory + Disk"),
          h("th.num", "In flight"),
          h("th.num", "Deferred"),
          h("th.num", "Requeued"),
          h("th.num", "Timed out"),
          h("th.num", "Messages"),
          h("th.num", "Channels"),
          ...e2eHeaders(qs),
          h("th"),
        ),
      ),
      h("tbody", nodeRows),
      h(
        "tfoot",
        h(
          "tr.total",
          { testid: "topic-total" },
          h("td", "Total"),
          h("td.chart", sparkline(totalSeries.points, { testid: "topic-rate-chart", title: `${topic} msgs/s` })),
          num(data.depth, "depth"),
          memDisk(data),
          num(sumChannels(allCh, "in_flight_count"), "in-flight"),
          num(sumChannels(allCh, "deferred_count"), "deferred"),
          num(sumChannels(allCh, "requeue_count"), "requeued"),
          num(sumChannels(allCh, "timeout_count"), "timed-out"),
          num(data.message_count, "messages"),
          num(channels.length, "channels"),
          ...e2eCells(data.e2e_processing_latency, qs),
          h("td"),
        ),
      ),
    );

    const cqs = quantiles(...channels.map((c) => c.e2e_processing_latency));
    const channelRows = channels.map((c) => {
      const series = rates.observe(`channel:${c.channel_name}`, c.message_count, now);
      return h(
        "tr",
        { testid: "channel-row", data: { channel: c.channel_name, key: c.channel_name } },
        h("td.name", link(channelPath(topic, c.channel_name), c.channel_name, { testid: "channel-link" }), " ", pausedBadge(c.paused)),
        h("td.chart", sparkline(series.points, { title: `${c.channel_name} msgs/s` })),
        num(c.depth, "depth"),
        memDisk(c),
        num(c.in_flight_count, "in-flight"),
        num(c.deferred_count, "deferred"),
        num(c.requeue_count, "requeued"),
        num(c.timeout_count, "timed-out"),
        num(c.message_count, "messages"),
        num(c.client_count, "connections"),
        ...e2eCells(c.e2e_processing_latency, cqs),
      );
    });
    const channelTable = channels.length
      ? h(
          "table.grid",
          { testid: "topic-channels" },
          h(
            "thead",
            cqs.length ? h("tr.group", h("th", { colspan: 10 }), h("th.center", { colspan: cqs.length }, "E2E processing latency")) : null,
            h(
              "tr",
              h("th", "Channel"),
              h("th", "Rate (msgs/s)"),
              h("th.num", "Depth"),
              h("th.num", "Memory + Disk"),
              h("th.num", "In flight"),
              h("th.num", "Deferred"),
              h("th.num", "Requeued"),
              h("th.num", "Timed out"),
              h("th.num", "Messages"),
              h("th.num", "Connections"),
              ...e2eHeaders(cqs),
            ),
          ),
          h("tbody", channelRows),
        )
      : empty("No channels exist for this topic: messages queue at the topic until a channel is created.", "no-channels");

    render(
      body,
      h("h2", "Per nsqd"),
      nodes.length || down.size
        ? nodeTable
        : empty("No nsqd produces this topic. See Lookup for topics known only to nsqlookupd.", "no-producers"),
      h("h2", `Channels (${commafy(channels.length)})`),
      channelTable,
    );
    return data;
  });
}

export const actions = {
  pause: (_d, ctx) =>
    runAction({
      confirm: `Pause topic ${topic}? Its messages stop flowing to its channels until it is unpaused.`,
      call: () => api.post(`/topics/${enc(topic)}`, { action: "pause" }),
      done: `Topic ${topic} paused`,
      failed: `Could not pause topic ${topic}`,
      after: () => ctx.refresh(),
    }),
  unpause: (_d, ctx) =>
    runAction({
      confirm: `Unpause topic ${topic}?`,
      call: () => api.post(`/topics/${enc(topic)}`, { action: "unpause" }),
      done: `Topic ${topic} unpaused`,
      failed: `Could not unpause topic ${topic}`,
      after: () => ctx.refresh(),
    }),
  empty: (_d, ctx) =>
    runAction({
      confirm: `Empty topic ${topic}? The messages queued at the topic on every nsqd are dropped (its channels keep theirs).`,
      call: () => api.post(`/topics/${enc(topic)}`, { action: "empty" }),
      done: `Topic ${topic} emptied`,
      failed: `Could not empty topic ${topic}`,
      after: () => ctx.refresh(),
    }),
  delete: (_d, ctx) =>
    runAction({
      confirm: `Delete topic ${topic}? It is removed, with all its channels and queued messages, from every nsqd and nsqlookupd.`,
      call: () => api.del(`/topics/${enc(topic)}`),
      done: `Topic ${topic} deleted`,
      failed: `Could not delete topic ${topic}`,
      after: () => ctx.navigate("/topics"),
    }),
  tombstone: (d, ctx) =>
    runAction({
      confirm: `Tombstone topic ${d.topic} on ${d.node}? nsqlookupd stops handing out this node for the topic, and the topic is deleted from that nsqd.`,
      call: () => api.del(`/nodes/${encNode(d.node)}`, { topic: d.topic }),
      done: `Topic ${d.topic} tombstoned on ${d.node}`,
      failed: `Could not tombstone topic ${d.topic} on ${d.node}`,
      after: () => ctx.refresh(),
    }),
};
