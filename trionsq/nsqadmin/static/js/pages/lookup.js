// Lookup: the nsqlookupd instances, the topics and channels they know (including those no nsqd
// produces yet), and a form to create a topic (and channel) ahead of its producers.

import { api } from "../api.js";
import { h, render } from "../dom.js";
import { config, enc } from "../config.js";
import { runAction } from "../actions.js";
import { actionButton, badge, channelPath, empty, link, topicPath } from "./common.js";

const NAME = /^[.a-zA-Z0-9_-]+(#ephemeral)?$/;

export function validName(name) {
  return name.length >= 1 && name.length <= 64 && NAME.test(name);
}

export function mount(root, _params, ctx) {
  document.title = "Lookup · nsqadmin";
  root.append(h("div.page-head", h("h1", { testid: "page-title" }, "Lookup")));
  if (!config.nsqlookupd.length) {
    root.append(
      empty(
        [
          "nsqadmin is not configured with any nsqlookupd (--lookupd-http-address), so there is nothing to look up here. ",
          config.nsqdAddresses.length ? `It reads a fixed list of nsqd instead: ${config.nsqdAddresses.join(", ")}.` : "",
        ],
        "lookup-not-configured",
      ),
    );
    return;
  }
  const hosts = h(
    "div.lookupd-hosts",
    { testid: "lookupd-hosts" },
    h("h2", "nsqlookupd"),
    h("ul.plain", config.nsqlookupd.map((a) => h("li", { testid: "lookupd-host" }, h("code", a)))),
  );
  const body = h("div", { testid: "lookup-body" });
  const form = config.isAdmin ? createForm(ctx) : h("p.readonly-note", { testid: "readonly-note" }, "Read-only: creating topics is only offered to nsqadmin's admin users.");
  root.append(h("div.lookup-layout", h("div.lookup-main", body), h("aside.lookup-side", form, hosts)));

  ctx.poll(async () => {
    const [all, inactive] = await Promise.all([api.get("/topics"), api.get("/topics?inactive=true")]);
    const inactiveMap = inactive.topics && !Array.isArray(inactive.topics) ? inactive.topics : {};
    const names = new Set([...(all.topics || []), ...Object.keys(inactiveMap)]);
    const sorted = [...names].sort();
    if (!sorted.length) {
      render(body, h("h2", "Topics in nsqlookupd"), empty("nsqlookupd knows no topics yet.", "no-topics"));
    } else {
      render(
        body,
        h("h2", `Topics in nsqlookupd (${sorted.length})`),
        h(
          "table.grid",
          { testid: "lookup-topics" },
          h("thead", h("tr", h("th", "Topic"), h("th", "Producers"), h("th", "Channels (inactive topics)"), h("th"))),
          h(
            "tbody",
            sorted.map((t) => {
              const isInactive = Object.hasOwn(inactiveMap, t);
              const channels = isInactive ? [...(inactiveMap[t] || [])].sort() : [];
              return h(
                "tr",
                { testid: "lookup-topic", data: { topic: t, key: t, inactive: isInactive ? "true" : "false" } },
                h("td.name", link(topicPath(t), t, { testid: "topic-link" })),
                h("td", isInactive ? badge("no producer", "warn", { title: "known to nsqlookupd, produced by no nsqd" }) : badge("produced", "ok")),
                h(
                  "td",
                  isInactive
                    ? channels.length
                      ? channels.map((c) =>
                          h(
                            "span.chip-group",
                            { testid: "lookup-channel", data: { channel: c } },
                            link(channelPath(t, c), c, { class: "chip" }),
                            config.isAdmin ? h("button.chip-x", { type: "button", title: `Delete channel ${c} of ${t}`, data: { action: "delete-channel", topic: t, channel: c }, testid: "delete-channel" }, "×") : null,
                          ),
                        )
                      : h("span.muted", "none")
                    : h("span.muted", "see the topic page"),
                ),
                h(
                  "td.row-actions",
                  isInactive && config.isAdmin
                    ? actionButton({ action: "delete-topic", label: "delete", kind: "small.btn-danger-outline", data: { topic: t }, testid: "delete-topic" })
                    : null,
                ),
              );
            }),
          ),
        ),
      );
    }
    return {
      errors: [...(all.errors || []), ...(inactive.errors || [])].filter(
        (e, i, arr) => arr.findIndex((x) => x.address === e.address) === i,
      ),
      message: all.message || inactive.message,
    };
  });
}

function createForm(ctx) {
  const topicInput = h("input", { name: "topic", type: "text", placeholder: "topic name", autocomplete: "off", required: true, maxlength: 64, testid: "create-topic-input" });
  const channelInput = h("input", { name: "channel", type: "text", placeholder: "channel name (optional)", autocomplete: "off", maxlength: 64, testid: "create-channel-input" });
  const hint = h("p.form-error", { testid: "create-error" });
  const form = h(
    "form.card",
    { testid: "create-form", novalidate: true },
    h("h2", "Create topic / channel"),
    h("p.muted.small", "Set up a topic (and a channel) in nsqlookupd before its producers and consumers are deployed. Leave the channel empty to create just the topic."),
    h("label", "Topic", topicInput),
    h("label", "Channel", channelInput),
    hint,
    h("button.btn.btn-primary", { type: "submit", testid: "create-submit" }, "Create"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const topic = topicInput.value.trim();
    const channel = channelInput.value.trim();
    hint.textContent = "";
    if (!validName(topic)) {
      hint.textContent = "A topic name is 1–64 characters: letters, digits, '.', '_', '-', optionally ending in #ephemeral.";
      topicInput.focus();
      return;
    }
    if (channel && !validName(channel)) {
      hint.textContent = "A channel name is 1–64 characters: letters, digits, '.', '_', '-', optionally ending in #ephemeral.";
      channelInput.focus();
      return;
    }
    const what = channel ? `topic ${topic} with channel ${channel}` : `topic ${topic}`;
    await runAction({
      confirm: `Create ${what} in nsqlookupd?`,
      call: () => api.post("/topics", channel ? { topic, channel } : { topic }),
      done: `Created ${what}`,
      failed: `Could not create ${what}`,
      // Clear the form now (unless it was already edited), not after the refresh.
      succeeded: () => {
        if (topicInput.value.trim() === topic) topicInput.value = "";
        if (channelInput.value.trim() === channel) channelInput.value = "";
      },
      after: () => ctx.refresh(),
    });
  });
  return form;
}

export const actions = {
  "delete-topic": (d, ctx) =>
    runAction({
      confirm: `Delete topic ${d.topic}? It is removed, with its channels, from nsqlookupd (and from any nsqd that has it).`,
      call: () => api.del(`/topics/${enc(d.topic)}`),
      done: `Topic ${d.topic} deleted`,
      failed: `Could not delete topic ${d.topic}`,
      after: () => ctx.refresh(),
    }),
  "delete-channel": (d, ctx) =>
    runAction({
      confirm: `Delete channel ${d.channel} of topic ${d.topic}?`,
      call: () => api.del(`/topics/${enc(d.topic)}/${enc(d.channel)}`),
      done: `Channel ${d.channel} of topic ${d.topic} deleted`,
      failed: `Could not delete channel ${d.channel}`,
      after: () => ctx.refresh(),
    }),
};
