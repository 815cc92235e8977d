// A node: one nsqd's topics, channels and clients, with a tombstone button per topic.

import { api } from "../api.js";
import { h, render } from "../dom.js";
import { RateTracker, sparkline } from "../chart.js";
import { commafy, connectedFor } from "../format.js";
import { unansweredMap } from "../banners.js";
import { clientBadges } from "./channel.js";
import {
  channelPath,
  encNode,
  empty,
  link,
  notAnsweringBadge,
  pausedBadge,
  statCells,
  statHeaders,
  tombstoneAction,
  tombstoneButton,
  topicPath,
} from "./common.js";

let node = "";

export function mount(root, params, ctx) {
  node = params.node;
  document.title = `${node} · nsqadmin`;
  const rates = new RateTracker();
  const title = h("h1", { testid: "page-title" }, h("span.kind", "nsqd "), node);
  const summary = h("div.summary", { testid: "node-summary" });
  const body = h("div", { testid: "node-body" });
  root.append(h("nav.crumbs", link("/nodes", "Nodes"), h("span", "›"), h("span", node)), h("div.page-head", title), summary, body);

  ctx.poll(async () => {
    let data;
    try {
      data = await api.get(`/nodes/${encNode(node)}`);
    } catch (err) {
      if (err.status === 404) {
        render(summary);
        render(body, empty(`No nsqd ${node} is known to nsqadmin.`, "not-found"));
        return {};
      }
      if (err.status >= 500) {
        render(title, h("span.kind", "nsqd "), node, " ", notAnsweringBadge(err.message));
        render(summary);
        render(body, empty(`This nsqd is not answering: ${err.message}`, "node-down"));
        return {};
      }
      throw err;
    }
    const now = performance.now();
    const down = unansweredMap(data.errors).get(node);
    const topics = [...(data.topics || [])].sort((a, b) => a.topic_name.localeCompare(b.topic_name));
    render(title, h("span.kind", "nsqd "), node, " ", down ? notAnsweringBadge(down) : null);
    const nodeSeries = rates.observe("node", data.total_messages, now);
    render(
      summary,
      h("div.stat", h("div.stat-value", { testid: "node-topic-count" }, commafy(topics.length)), h("div.stat-label", "topics")),
      h("div.stat", h("div.stat-value", { testid: "node-total-messages" }, commafy(data.total_messages)), h("div.stat-label", "messages")),
      h("div.stat", h("div.stat-value", { testid: "node-total-clients" }, commafy(data.total_clients)), h("div.stat-label", "clients")),
      h("div.stat", sparkline(nodeSeries.points, { width: 200, height: 34, testid: "node-rate-chart", title: `${node} msgs/s` }), h("div.stat-label", "msgs/s")),
    );
    if (!topics.length) {
      render(body, down ? empty(`This nsqd is not answering: ${down}`, "node-down") : empty("No topics exist on this node.", "no-topics"));
      return data;
    }
    const blocks = topics.map((t) => {
      const channels = [...(t.channels || [])].sort((a, b) => a.channel_name.localeCompare(b.channel_name));
      const rows = [];
      for (const c of channels) {
        rows.push(
          h(
            "tr",
            { testid: "channel-row", data: { channel: c.channel_name, key: `c:${c.channel_name}` } },
            h("td.name.indent", link(channelPath(t.topic_name, c.channel_name), c.channel_name), " ", pausedBadge(c.paused)),
            ...statCells(c, (c.clients || []).length || c.client_count),
          ),
        );
        const clients = c.clients || [];
        if (clients.length) {
          rows.push(
            h(
              "tr.clients-row",
              { data: { key: `k:${c.channel_name}` } },
              h(
                "td.indent2",
                { colspan: 9 },
                clients.map((cl) =>
                  h(
                    "span.client-chip",
                    { testid: "client-chip", title: `${cl.remote_address} · ${cl.user_agent || "no user agent"}` },
                    h("strong", cl.hostname || cl.remote_address),
                    h("span.muted", ` ${cl.user_agent || ""}`),
                    " ",
                    clientBadges(cl, { plain: false }),
                    h("span.muted", ` · ready ${commafy(cl.ready_count)} · in flight ${commafy(cl.in_flight_count)} · finished ${commafy(cl.finish_count)} · ${connectedFor(cl)}`),
                  ),
                ),
              ),
            ),
          );
        }
      }
      return h(
        "section.topic-block",
        { testid: "node-topic", data: { topic: t.topic_name, key: t.topic_name } },
        h(
          "div.topic-block-head",
          h("h2", link(topicPath(t.topic_name), t.topic_name, { testid: "topic-link" }), " ", pausedBadge(t.paused)),
          h("span.chart", sparkline(rates.observe(`topic:${t.topic_name}`, t.message_count, now).points, { title: `${t.topic_name} msgs/s` })),
          h("span.kv", "depth ", h("strong", { testid: "topic-depth" }, commafy(t.depth))),
          h("span.kv", "memory + disk ", h("strong", `${commafy(t.memory_depth)} + ${commafy(t.backend_depth)}`)),
          h("span.kv", "messages ", h("strong", { testid: "topic-messages" }, commafy(t.message_count))),
          h("span.spacer"),
          tombstoneButton(t.topic_name, node),
        ),
        channels.length
          ? h(
              "table.grid.compact",
              h("thead", h("tr", h("th", "Channel"), ...statHeaders())),
              h("tbody", rows),
            )
          : h("p.muted.indent", "No channels: messages queue at the topic."),
      );
    });
    render(body, blocks);
    return data;
  });
}

export const actions = {
  tombstone: tombstoneAction,
};
