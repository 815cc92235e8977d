// Pieces shared by the pages: links, badges, number cells, e2e latency columns, action buttons.

import { api } from "../api.js";
import { h } from "../dom.js";
import { historyChart } from "../chart.js";
import { runAction } from "../actions.js";
import { config, enc, pagePath } from "../config.js";
import { commafy, nanos, quantileLabel } from "../format.js";

export function link(path, text, attrs = {}) {
  return h("a", { href: pagePath(path), "data-link": true, ...attrs }, text);
}

export const topicPath = (t) => `/topics/${enc(t)}`;
export const channelPath = (t, c) => `/topics/${enc(t)}/${enc(c)}`;
// Node addresses keep their ":" (and IPv6 brackets) readable in URLs.
export const encNode = (n) => enc(n).replace(/%3A/gi, ":").replace(/%5B/gi, "[").replace(/%5D/gi, "]");
export const nodePath = (n) => `/nodes/${encNode(n)}`;

export function num(value, testid, attrs = {}) {
  return h("td.num", { testid, ...attrs }, commafy(value));
}

// "1,024 + 3,000" (in memory + on disk)
export function memDisk(stats, testid = "mem-disk") {
  return h(
    "td.num",
    { testid, title: "in memory + on disk" },
    commafy(stats.memory_depth),
    h("span.muted", " + "),
    commafy(stats.backend_depth),
  );
}

export function badge(text, kind = "", attrs = {}) {
  return h(`span.badge${kind ? `.badge-${kind}` : ""}`, attrs, text);
}

// trionsq's dead-lettering and TTL: the channel's counts and a link to its dead-letter topic,
// or nothing when its nsqds do not dead-letter or expire (no such keys in their stats).
export function deadLetterInfo(s) {
  if (s.dead_letter_count === undefined) return null;
  const target = s.dead_letter_topic
    ? [" → ", link(topicPath(s.dead_letter_topic), s.dead_letter_topic, { testid: "dead-letter-link" })]
    : [];
  return h(
    "span.dead-letters",
    { testid: "dead-letters", title: "moved to the dead-letter topic (past max attempts or their TTL); expired: past their TTL" },
    badge(h("span", "dead-lettered ", h("b", { testid: "dead-letter-count" }, commafy(s.dead_letter_count))), "dead"),
    ...target,
    " ",
    badge(h("span", "expired ", h("b", { testid: "expired-count" }, commafy(s.expired_count))), "expired"),
  );
}

export function pausedBadge(paused) {
  return paused ? badge("paused", "paused", { testid: "paused-badge" }) : null;
}

export function notAnsweringBadge(error) {
  return badge("not answering", "down", { testid: "not-answering", title: error || "no answer" });
}

// Quantiles present in an e2e_processing_latency aggregate, sorted ascending.
export function quantiles(...aggregates) {
  const set = new Set();
  for (const agg of aggregates) {
    for (const p of (agg && agg.percentiles) || []) set.add(Number(p.quantile));
  }
  return Array.from(set).sort((a, b) => a - b);
}

export function e2eHeaders(qs) {
  return qs.map((q) => h("th.num", { title: `end-to-end processing latency, ${quantileLabel(q)}` }, quantileLabel(q)));
}

export function e2eCells(agg, qs) {
  const byQ = new Map();
  for (const p of (agg && agg.percentiles) || []) byQ.set(Number(p.quantile), p);
  return qs.map((q) => {
    const p = byQ.get(q);
    if (!p) return h("td.num.muted", "–");
    const avg = p.average !== undefined ? p.average : p.value;
    if (!avg) return h("td.num.muted", { testid: "e2e", title: "no message finished yet" }, "–");
    const title =
      p.min !== undefined && p.max !== undefined
        ? `${quantileLabel(q)}: min ${nanos(p.min)}, max ${nanos(p.max)}`
        : `${quantileLabel(q)}`;
    return h("td.num", { testid: "e2e", title }, nanos(avg));
  });
}

// A group of buttons; each is {action, label, kind, data, testid, title}. Nothing for non-admins.
export function actionBar(buttons, testid = "actions") {
  if (!config.isAdmin) {
    return h(
      "p.readonly-note",
      { testid: "readonly-note" },
      "Read-only: actions are only offered to nsqadmin's admin users.",
    );
  }
  return h("div.actions", { testid }, buttons.map(actionButton));
}

export function actionButton(b) {
  return h(
    `button.btn${b.kind ? `.btn-${b.kind}` : ""}`,
    { type: "button", data: { action: b.action, ...(b.data || {}) }, testid: b.testid || `action-${b.action}`, title: b.title },
    b.label,
  );
}

export function tombstoneButton(topic, node) {
  if (!config.isAdmin) return null;
  return h(
    "button.btn.btn-small.btn-danger-outline",
    {
      type: "button",
      data: { action: "tombstone", topic, node },
      testid: "tombstone",
      title: `Tombstone topic ${topic} on ${node}: lookupd stops listing this node for it, and the topic is deleted from that nsqd`,
    },
    "tombstone",
  );
}

export function empty(text, testid = "empty-notice") {
  return h("div.notice", { testid }, text);
}

// Sum a field over a node's channels (a topic has no in-flight count of its own).
export function sumChannels(channels, field) {
  let total = 0;
  for (const c of channels || []) total += Number(c[field] || 0);
  return total;
}

// A topic's in-flight, deferred, requeued and timed-out counts, summed over its channels.
export function channelTotals(channels) {
  return {
    in_flight_count: sumChannels(channels, "in_flight_count"),
    deferred_count: sumChannels(channels, "deferred_count"),
    requeue_count: sumChannels(channels, "requeue_count"),
    timeout_count: sumChannels(channels, "timeout_count"),
  };
}

// The number cells of a row: depth, memory + disk, in flight, deferred, requeued, timed out,
// messages, then `count` (connections, or channels for a topic). `counts` holds the in-flight,
// deferred, requeued and timed-out numbers when they are not `s`'s own.
export function statCells(s, count, countTestid = "connections", counts = s) {
  return [
    num(s.depth, "depth"),
    memDisk(s),
    num(counts.in_flight_count, "in-flight"),
    num(counts.deferred_count, "deferred"),
    num(counts.requeue_count, "requeued"),
    num(counts.timeout_count, "timed-out"),
    num(s.message_count, "messages"),
    num(count, countTestid),
  ];
}

// The headers that go with statCells.
export function statHeaders(countLabel = "Connections") {
  return ["Depth", "Memory + Disk", "In flight", "Deferred", "Requeued", "Timed out", "Messages", countLabel].map(
    (label) => h("th.num", label),
  );
}

// The header row above the e2e latency columns (none without quantiles); `trailing` adds an
// empty cell over a last column of row actions.
export function e2eGroupRow(qs, trailing = false) {
  if (!qs.length) return null;
  return h(
    "tr.group",
    h("th", { colspan: 10 }),
    h("th.center", { colspan: qs.length }, "E2E processing latency"),
    trailing ? h("th") : null,
  );
}

// The name cell of a per-nsqd row: a link to the node, its hostname when it differs, paused badge.
export function nodeNameCell(n) {
  return h(
    "td.name",
    link(nodePath(n.node), n.node, { testid: "node-link" }),
    n.hostname && n.hostname !== n.node ? h("span.host", n.hostname) : null,
    " ",
    pausedBadge(n.paused),
  );
}

// Rows for the nsqds that did not answer and are not among `nodes` (nsqlookupd addresses left
// out); `colspan` cells wide after the name, then `extra` cells.
export function downNodeRows(down, nodes, colspan, extra = []) {
  const shown = new Set(nodes.map((n) => n.node));
  const rows = [];
  for (const [address, error] of down) {
    if (shown.has(address) || config.nsqlookupd.includes(address)) continue;
    rows.push(
      h(
        "tr.down",
        { testid: "node-row", data: { node: address, key: address, down: "true" } },
        h("td.name", link(nodePath(address), address)),
        h("td.muted", { colspan }, notAnsweringBadge(error), ` ${error}`),
        ...extra.map((spec) => h(spec)),
      ),
    );
  }
  return rows;
}

// Pause or unpause, empty and delete buttons for a topic or a channel (`what`).
export function queueActionBar(what, paused) {
  return actionBar([
    paused
      ? { action: "unpause", label: `Unpause ${what}`, kind: "ok" }
      : { action: "pause", label: `Pause ${what}`, kind: "primary" },
    { action: "empty", label: `Empty ${what}`, kind: "warn" },
    { action: "delete", label: `Delete ${what}`, kind: "danger" },
  ]);
}

// The tombstone action behind tombstoneButton (topic and node pages).
export const tombstoneAction = (d, ctx) =>
  runAction({
    confirm: `Tombstone topic ${d.topic} on ${d.node}? nsqlookupd stops handing out this node for the topic, and the topic is deleted from that nsqd.`,
    call: () => api.del(`/nodes/${encNode(d.node)}`, { topic: d.topic }),
    done: `Topic ${d.topic} tombstoned on ${d.node}`,
    failed: `Could not tombstone topic ${d.topic} on ${d.node}`,
    after: () => ctx.refresh(),
  });

// The "Last hour" section of a topic or channel page: its history from /api/history
// (nsqadmin's own samples, or graphite's), or a line saying why there is none.
export async function lastHour(topic, channel = "") {
  const path = channel ? `/history/${enc(topic)}/${enc(channel)}` : `/history/${enc(topic)}`;
  let history;
  try {
    history = await api.get(path);
  } catch (err) {
    return [h("h2", "Last hour"), h("p.muted", { testid: "history-unavailable" }, `No history: ${err.message}`)];
  }
  return [h("h2", "Last hour"), historyChart(history.points || [], { source: history.source })];
}
