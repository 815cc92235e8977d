// Nodes: every nsqd nsqadmin knows of, with its ports, version, lookupd connections and topics.

import { api } from "../api.js";
import { h, render } from "../dom.js";
import { config } from "../config.js";
import { commafy } from "../format.js";
import { unansweredMap } from "../banners.js";
import { badge, empty, link, nodePath, notAnsweringBadge, topicPath } from "./common.js";

export function nodeAddress(n) {
  const host = String(n.broadcast_address || "");
  return `${host.includes(":") ? `[${host}]` : host}:${n.http_port}`;
}

export function mount(root, _params, ctx) {
  document.title = "Nodes · nsqadmin";
  const sub = h("span.sub", { testid: "page-sub" });
  const body = h("div", { testid: "nodes-body" });
  root.append(h("div.page-head", h("h1", { testid: "page-title" }, "Nodes"), sub), body);

  ctx.poll(async () => {
    const data = await api.get("/nodes");
    const down = unansweredMap(data.errors);
    const nodes = [...(data.nodes || [])].sort((a, b) => nodeAddress(a).localeCompare(nodeAddress(b)));
    const lookupdCount = config.nsqlookupd.length;
    const topo = nodes.some((n) => n.topology_region || n.topology_zone);
    render(sub, nodes.length === 1 ? "1 nsqd" : `${commafy(nodes.length)} nsqd`);
    if (!nodes.length && !down.size) {
      render(body, empty("No nsqd is known: none has registered with nsqlookupd yet.", "no-nodes"));
      return data;
    }
    const rows = nodes.map((n) => {
      const address = nodeAddress(n);
      const error = n.unreachable ? down.get(address) || "does not answer" : down.get(address);
      const topics = [...(n.topics || [])].sort((a, b) => a.topic.localeCompare(b.topic));
      const conns = (n.remote_addresses || []).length;
      return h(
        `tr${error ? ".down" : ""}`,
        { testid: "node-row", data: { node: address, key: address, down: error ? "true" : null } },
        h("td.name", link(nodePath(address), address, { testid: "node-link" })),
        h("td", n.hostname || "–"),
        h("td.num", n.tcp_port),
        h("td.num", n.http_port),
        h(
          "td",
          { testid: "node-version", title: n.out_of_date ? "older than the newest nsqd in the cluster" : null },
          n.version || "–",
          n.out_of_date ? [" ", badge("out of date", "warn")] : null,
        ),
        topo ? h("td", [n.topology_region, n.topology_zone].filter(Boolean).join(" / ") || "–") : null,
        lookupdCount
          ? h(
              "td.num",
              { testid: "node-lookupd-conns", title: (n.remote_addresses || []).join("\n") || null, class: conns !== lookupdCount ? "warn-text" : null },
              `${conns} / ${lookupdCount}`,
            )
          : null,
        h(
          "td.topics",
          { testid: "node-topics" },
          topics.length
            ? topics.map((t) =>
                link(topicPath(t.topic), t.topic, {
                  class: `chip${t.tombstoned ? " chip-tombstoned" : ""}`,
                  testid: t.tombstoned ? "topic-chip-tombstoned" : "topic-chip",
                  title: t.tombstoned ? `${t.topic} is tombstoned on this node in nsqlookupd` : null,
                }),
              )
            : h("span.muted", "no topics"),
        ),
        h("td", { testid: "node-status" }, error ? notAnsweringBadge(error) : badge("ok", "ok")),
      );
    });
    const shown = new Set(nodes.map(nodeAddress));
    for (const [address, error] of down) {
      if (shown.has(address) || config.nsqlookupd.includes(address)) continue;
      rows.push(
        h(
          "tr.down",
          { testid: "node-row", data: { node: address, key: address, down: "true" } },
          h("td.name", address),
          h("td.muted", { colspan: 4 + (topo ? 1 : 0) + (lookupdCount ? 1 : 0) + 1 }, `not answering: ${error}`),
          h("td", { testid: "node-status" }, notAnsweringBadge(error)),
        ),
      );
    }
    render(
      body,
      h(
        "table.grid",
        { testid: "nodes-table" },
        h(
          "thead",
          h(
            "tr",
            h("th", "nsqd (HTTP address)"),
            h("th", "Hostname"),
            h("th.num", "TCP port"),
            h("th.num", "HTTP port"),
            h("th", "Version"),
            topo ? h("th", "Region / zone") : null,
            lookupdCount ? h("th.num", { title: "nsqlookupd instances this nsqd is registered with" }, "Lookupd conns") : null,
            h("th", "Topics"),
            h("th", "Status"),
          ),
        ),
        h("tbody", rows),
      ),
    );
    return data;
  });
}
