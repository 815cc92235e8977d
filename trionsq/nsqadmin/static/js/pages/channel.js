// A channel: its numbers per nsqd, its clients (address, user agent, TLS / snappy / deflate /
// auth identity, ready count, in flight, finished, requeued, connected for), its actions, and
// (beyond NSQ) a peek at the messages it holds on each nsqd, on demand (not polled).

import { api, isNotFound } from "../api.js";
import { h, render } from "../dom.js";
import { RateTracker, sparkline } from "../chart.js";
import { commafy, connectedFor } from "../format.js";
import { config, enc } from "../config.js";
import { runAction } from "../actions.js";
import { unansweredMap } from "../banners.js";
import {
  badge,
  deadLetterInfo,
  downNodeRows,
  e2eCells,
  e2eGroupRow,
  e2eHeaders,
  empty,
  link,
  nodeNameCell,
  nodePath,
  num,
  pausedBadge,
  quantiles,
  queueActionBar,
  statCells,
  statHeaders,
  topicPath,
  lastHour,
} from "./common.js";

let topic = "";
let channel = "";
let peekBox = null;

export function mount(root, params, ctx) {
  topic = params.topic;
  channel = params.channel;
  document.title = `${topic} / ${channel} · nsqadmin`;
  const rates = new RateTracker();
  const title = h("h1", { testid: "page-title" });
  const actions = h("div");
  const body = h("div", { testid: "channel-body" });
  // Outside `body`, which every poll re-renders: peeked messages stay until peeked again.
  peekBox = h("div", { testid: "peek-results" });
  root.append(
    h("nav.crumbs", link("/topics", "Topics"), h("span", "›"), link(topicPath(topic), topic, { testid: "crumb-topic" }), h("span", "›"), h("span", channel)),
    h("div.page-head", title, actions),
    body,
    peekSection(),
  );
  render(title, h("span.kind", "Channel "), channel, h("span.kind", " of topic "), topic);

  ctx.poll(async () => {
    let data;
    try {
      data = await api.get(`/topics/${enc(topic)}/${enc(channel)}`);
    } catch (err) {
      if (isNotFound(err)) {
        render(actions);
        render(body, empty(`Channel ${channel} of topic ${topic} does not exist on any nsqd.`, "not-found"));
        return {};
      }
      throw err;
    }
    const now = performance.now();
    const history = await lastHour(topic, channel);
    const down = unansweredMap(data.errors);
    const nodes = data.nodes || [];
    const clients = [...(data.clients || [])].sort(
      (a, b) => String(a.node).localeCompare(String(b.node)) || String(a.hostname).localeCompare(String(b.hostname)),
    );
    render(title, h("span.kind", "Channel "), channel, h("span.kind", " of topic "), topic, " ", pausedBadge(data.paused));
    render(actions, nodes.length ? queueActionBar("channel", data.paused) : null);

    const qs = quantiles(data.e2e_processing_latency, ...nodes.map((n) => n.e2e_processing_latency));
    const nodeRows = nodes.map((n) =>
      h(
        "tr",
        { testid: "node-row", data: { node: n.node, key: n.node } },
        nodeNameCell(n),
        h("td.chart", sparkline(rates.observe(`node:${n.node}`, n.message_count, now).points, { title: `${n.node} msgs/s` })),
        ...statCells(n, n.client_count),
        ...e2eCells(n.e2e_processing_latency, qs),
      ),
    );
    nodeRows.push(...downNodeRows(down, nodes, 9 + qs.length));
    const nodeTable = h(
      "table.grid",
      { testid: "channel-nodes" },
      h(
        "thead",
        e2eGroupRow(qs),
        h("tr", h("th", "nsqd"), h("th", "Rate (msgs/s)"), ...statHeaders(), ...e2eHeaders(qs)),
      ),
      h("tbody", nodeRows),
      h(
        "tfoot",
        h(
          "tr.total",
          { testid: "channel-total" },
          h("td", "Total"),
          h("td.chart", sparkline(rates.observe("channel", data.message_count, now).points, { testid: "channel-rate-chart", title: `${channel} msgs/s` })),
          ...statCells(data, data.client_count),
          ...e2eCells(data.e2e_processing_latency, qs),
        ),
      ),
    );

    const clientRows = clients.map((c) =>
      h(
        "tr",
        { testid: "client-row", data: { client: c.client_id, key: `${c.node}|${c.remote_address}`, node: c.node } },
        h("td.name", { title: c.remote_address }, h("span", { testid: "client-host" }, c.hostname || c.remote_address), h("div.muted.small", c.remote_address)),
        h("td", { testid: "client-id" }, c.client_id || "–"),
        h("td.ua", { testid: "client-user-agent" }, c.user_agent || h("span.muted", "–")),
        h("td", { testid: "client-attributes" }, clientBadges(c)),
        h("td", link(nodePath(c.node), c.node)),
        num(c.ready_count, "client-ready"),
        num(c.in_flight_count, "client-in-flight"),
        num(c.finish_count, "client-finished"),
        num(c.requeue_count, "client-requeued"),
        num(c.message_count, "client-messages"),
        h("td.num", { testid: "client-connected", title: c.connect_ts ? new Date(c.connect_ts * 1000).toLocaleString() : null }, connectedFor(c)),
      ),
    );
    const clientTable = clients.length
      ? h(
          "table.grid",
          { testid: "channel-clients" },
          h(
            "thead",
            h(
              "tr",
              h("th", "Client"),
              h("th", "Client ID"),
              h("th", "User agent"),
              h("th", "Attributes"),
              h("th", "nsqd"),
              h("th.num", "Ready"),
              h("th.num", "In flight"),
              h("th.num", "Finished"),
              h("th.num", "Requeued"),
              h("th.num", "Messages"),
              h("th.num", "Connected for"),
            ),
          ),
          h("tbody", clientRows),
        )
      : empty("No clients are connected to this channel.", "no-clients");

    const deadLetters = deadLetterInfo(data);
    render(
      body,
      deadLetters ? h("p.dead-letter-summary", deadLetters) : null,
      ...history,
      h("h2", "Per nsqd"),
      nodes.length || down.size ? nodeTable : empty("No nsqd has this channel.", "no-producers"),
      h("h2", `Clients (${commafy(clients.length)})`),
      clientTable,
    );
    return data;
  });
}

// -- peek (beyond NSQ) ---------------------------------------------------------------------

function peekSection() {
  const head = h("h2", "Peek at messages");
  if (!config.isAdmin) {
    return h("section.peek", { testid: "peek" }, head, h("p.readonly-note", { testid: "peek-readonly" }, "Read-only: message bodies are only shown to nsqadmin's admin users."));
  }
  return h(
    "section.peek",
    { testid: "peek" },
    head,
    h(
      "p.muted",
      "The messages queued on each nsqd (in memory, then on disk, in delivery order) and the deferred ones, without consuming or changing them. In-flight messages are not shown.",
    ),
    h(
      "div.peek-controls",
      h("label", { for: "peek-n" }, "Messages per nsqd "),
      h("input", { id: "peek-n", type: "number", min: "1", max: "1000", value: "10", testid: "peek-n" }),
      " ",
      h("button.btn.btn-primary", { type: "button", data: { action: "peek" }, testid: "peek-button" }, "Peek"),
    ),
    peekBox,
  );
}

async function peek(button) {
  const input = document.getElementById("peek-n");
  const n = Math.min(1000, Math.max(1, Number.parseInt(input && input.value, 10) || 10));
  button.disabled = true;
  render(peekBox, h("p.muted", { testid: "peek-loading" }, "Peeking…"));
  try {
    const data = await api.get(`/topics/${enc(topic)}/${enc(channel)}/peek?n=${n}`);
    const nodes = data.nodes || [];
    render(peekBox, nodes.length ? nodes.map(peekNode) : empty("No nsqd has this topic.", "peek-empty"));
  } catch (err) {
    render(peekBox, h("div.notice", { testid: "peek-error" }, `Could not peek: ${err.message}`));
  } finally {
    button.disabled = false;
  }
}

function peekError(error) {
  if (/CHANNEL_NOT_FOUND/.test(error)) return "This nsqd does not have this channel.";
  if (/TOPIC_NOT_FOUND/.test(error)) return "This nsqd does not have this topic.";
  if (/^HTTP 404\b/.test(error)) return "This nsqd cannot peek: it has no /channel/peek (Go nsqd has none).";
  return `This nsqd did not answer the peek: ${error}`;
}

function peekNode(n) {
  const title = h("h3", { testid: "peek-node-name" }, link(nodePath(n.node), n.node));
  if (n.error) {
    return h("div.peek-node", { testid: "peek-node", data: { node: n.node, key: n.node } }, title, empty(peekError(n.error), "peek-node-error"));
  }
  const messages = n.messages || [];
  const deferred = n.deferred || [];
  const summary = h(
    "p.muted",
    { testid: "peek-summary" },
    `${commafy(n.depth)} queued · ${commafy(n.deferred_count)} deferred · ${commafy(n.in_flight_count)} in flight`,
    n.paused ? " · paused" : "",
  );
  const rows = [...messages, ...deferred].map((m) =>
    h(
      "tr",
      { testid: "peek-message", data: { id: m.id, queue: m.queue, key: `${m.queue}|${m.id}` } },
      h("td", h("code", { testid: "peek-id" }, m.id)),
      h("td", { testid: "peek-queue" }, m.queue),
      num(m.attempts, "peek-attempts"),
      h("td", { testid: "peek-timestamp", title: String(m.timestamp) }, new Date(m.timestamp / 1e6).toLocaleString()),
      h("td", { testid: "peek-due" }, m.deferred_until ? new Date(m.deferred_until / 1e6).toLocaleString() : h("span.muted", "–")),
      h(
        "td.peek-body",
        m.body_encoding === "base64" ? badge("base64", "", { testid: "peek-base64", title: "not printable text: shown as base64" }) : null,
        m.body_encoding === "base64" ? " " : null,
        h("code", { testid: "peek-body" }, m.body),
      ),
    ),
  );
  const table = rows.length
    ? h(
        "table.grid.peek-table",
        { testid: "peek-table" },
        h("thead", h("tr", h("th", "ID"), h("th", "Queue"), h("th.num", "Attempts"), h("th", "Published"), h("th", "Due"), h("th", "Body"))),
        h("tbody", rows),
      )
    : empty("Nothing is queued or deferred here.", "peek-node-empty");
  return h("div.peek-node", { testid: "peek-node", data: { node: n.node, key: n.node } }, title, summary, table);
}

export function clientBadges(c, { plain = true } = {}) {
  const out = [];
  if (c.tls) {
    const detail = [c.tls_version, c.tls_cipher_suite, c.tls_negotiated_protocol].filter(Boolean).join(" ");
    out.push(badge(c.tls_version ? `TLS ${c.tls_version.replace(/^TLS/, "")}` : "TLS", "tls", { testid: "badge-tls", title: detail || "TLS" }));
  }
  if (c.snappy) out.push(badge("snappy", "snappy", { testid: "badge-snappy" }));
  if (c.deflate) out.push(badge("deflate", "deflate", { testid: "badge-deflate" }));
  if (c.sample_rate) out.push(badge(`sampled ${c.sample_rate}%`, "", { testid: "badge-sampled" }));
  if (c.authed || c.auth_identity) {
    const who = c.auth_identity || "authed";
    const label = c.auth_identity_url ? h("a", { href: c.auth_identity_url, rel: "noreferrer" }, who) : who;
    out.push(badge(h("span", "auth: ", label), "auth", { testid: "badge-auth", title: `authenticated${c.auth_identity ? ` as ${c.auth_identity}` : ""}` }));
  }
  if (c.topology_region) out.push(badge(c.topology_region, "", { title: "topology region" }));
  if (c.topology_zone) out.push(badge(c.topology_zone, "", { title: "topology zone" }));
  if (!out.length && plain) out.push(h("span.muted", { title: "no TLS, compression or auth" }, "plain"));
  return out;
}

export const actions = {
  peek: (_d, _ctx, button) => peek(button),
  pause: (_d, ctx) =>
    runAction({
      confirm: `Pause channel ${channel} of topic ${topic}? Its consumers get no messages until it is unpaused.`,
      call: () => api.post(`/topics/${enc(topic)}/${enc(channel)}`, { action: "pause" }),
      done: `Channel ${channel} of topic ${topic} paused`,
      failed: `Could not pause channel ${channel}`,
      after: () => ctx.refresh(),
    }),
  unpause: (_d, ctx) =>
    runAction({
      confirm: `Unpause channel ${channel} of topic ${topic}?`,
      call: () => api.post(`/topics/${enc(topic)}/${enc(channel)}`, { action: "unpause" }),
      done: `Channel ${channel} of topic ${topic} unpaused`,
      failed: `Could not unpause channel ${channel}`,
      after: () => ctx.refresh(),
    }),
  empty: (_d, ctx) =>
    runAction({
      confirm: `Empty channel ${channel} of topic ${topic}? Its queued messages are dropped on every nsqd.`,
      call: () => api.post(`/topics/${enc(topic)}/${enc(channel)}`, { action: "empty" }),
      done: `Channel ${channel} of topic ${topic} emptied`,
      failed: `Could not empty channel ${channel}`,
      after: () => ctx.refresh(),
    }),
  delete: (_d, ctx) =>
    runAction({
      confirm: `Delete channel ${channel} of topic ${topic}? It is removed, with its queued messages, from every nsqd and nsqlookupd.`,
      call: () => api.del(`/topics/${enc(topic)}/${enc(channel)}`),
      done: `Channel ${channel} of topic ${topic} deleted`,
      failed: `Could not delete channel ${channel}`,
      after: () => ctx.navigate(topicPath(topic)),
    }),
};
