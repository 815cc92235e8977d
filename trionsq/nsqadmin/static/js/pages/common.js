// Pieces shared by the pages: links, badges, number cells, e2e latency columns, action buttons.

import { h } from "../dom.js";
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
