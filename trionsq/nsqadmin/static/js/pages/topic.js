// A topic: its numbers per nsqd (depth in memory and on disk, in flight, deferred, requeued,
// timed out, messages, e2e latency, live rate), its channels, and the topic actions.

import { api, isNotFound } from "../api.js";
import { h, render } from "../dom.js";
import { enc } from "../config.js";
import { RateTracker, sparkline } from "../chart.js";
import { commafy } from "../format.js";
import { runAction } from "../actions.js";
import { unansweredMap } from "../banners.js";
import {
  channelPath,
  channelTotals,
  deadLetterInfo,
  downNodeRows,
  e2eCells,
  e2eGroupRow,
  e2eHeaders,
  empty,
  link,
  nodeNameCell,
  pausedBadge,
  quantiles,
  queueActionBar,
  statCells,
  statHeaders,
  tombstoneAction,
  tombstoneButton,
  lastHour,
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
    const history = await lastHour(topic);
    const down = unansweredMap(data.errors);
    const nodes = data.nodes || [];
    const channels = [...(data.channels || [])].sort((a, b) => a.channel_name.localeCompare(b.channel_name));
    render(title, h("span.kind", "Topic "), topic, " ", pausedBadge(data.paused));
    render(actions, nodes.length ? queueActionBar("topic", data.paused) : null);

    const qs = quantiles(data.e2e_processing_latency, ...nodes.map((n) => n.e2e_processing_latency));
    const totalSeries = rates.observe("topic", data.message_count, now);
    const nodeRows = nodes.map((n) => {
      const series = rates.observe(`node:${n.node}`, n.message_count, now);
      return h(
        "tr",
        { testid: "node-row", data: { node: n.node, key: n.node } },
        withReplication(nodeNameCell(n), n.replication),
        h("td.chart", sparkline(series.points, { title: `${n.node} msgs/s` })),
        ...statCells(n, (n.channels || []).length, "channels", channelTotals(n.channels)),
        ...e2eCells(n.e2e_processing_latency, qs),
        h("td.row-actions", tombstoneButton(topic, n.node)),
      );
    });
    nodeRows.push(...downNodeRows(down, nodes, 9 + qs.length, ["td"]));
    const allCh = nodes.flatMap((n) => n.channels || []);
    const nodeTable = h(
      "table.grid",
      { testid: "topic-nodes" },
      h(
        "thead",
        e2eGroupRow(qs, true),
        h("tr", h("th", "nsqd"), h("th", "Rate (msgs/s)"), ...statHeaders("Channels"), ...e2eHeaders(qs), h("th")),
      ),
      h("tbody", nodeRows),
      h(
        "tfoot",
        h(
          "tr.total",
          { testid: "topic-total" },
          h("td", "Total"),
          h("td.chart", sparkline(totalSeries.points, { testid: "topic-rate-chart", title: `${topic} msgs/s` })),
          ...statCells(data, channels.length, "channels", channelTotals(allCh)),
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
        h(
          "td.name",
          link(channelPath(topic, c.channel_name), c.channel_name, { testid: "channel-link" }),
          " ",
          pausedBadge(c.paused),
          deadLetterInfo(c) ? h("div.small", deadLetterInfo(c)) : null,
        ),
        h("td.chart", sparkline(series.points, { title: `${c.channel_name} msgs/s` })),
        ...statCells(c, c.client_count),
        ...e2eCells(c.e2e_processing_latency, cqs),
      );
    });
    const channelTable = channels.length
      ? h(
          "table.grid",
          { testid: "topic-channels" },
          h(
            "thead",
            e2eGroupRow(cqs),
            h("tr", h("th", "Channel"), h("th", "Rate (msgs/s)"), ...statHeaders(), ...e2eHeaders(cqs)),
          ),
          h("tbody", channelRows),
        )
      : empty("No channels exist for this topic: messages queue at the topic until a channel is created.", "no-channels");

    render(
      body,
      ...history,
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
  tombstone: tombstoneAction,
};

// A replicated topic (trionsq, docs/replication.md): the node's role, epoch and replication lag
// under its name.
function withReplication(cell, r) {
  if (!r) return cell;
  const lag = r.max_lag_messages === null || r.max_lag_messages === undefined ? "" : ` · lag ${commafy(r.max_lag_messages)} msgs`;
  const text = `${r.role} · epoch ${r.epoch_text}${lag} · ${r.members_connected}/${r.members} members connected`;
  cell.append(h("div.small", { testid: "replication", title: `primary: ${r.primary || "unknown"}; failovers here: ${r.failovers}` }, text));
  return cell;
}
