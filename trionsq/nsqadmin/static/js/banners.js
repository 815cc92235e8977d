// The banner area under the header: what the last poll could not get (nodes not answering,
// nsqadmin itself unreachable, API warnings) and the outcome of the last action.

import { h, render } from "./dom.js";
import { config } from "./config.js";

const state = { problems: null, notice: null, noticeTimer: null };

function role(address) {
  return config.nsqlookupd.includes(address) ? "nsqlookupd" : "nsqd";
}

// `errors`: the API's [{address, error}]; `message`: its "WARNING: ..." text; `failure`: an
// ApiError when the page's data could not be loaded at all.
export function setProblems({ errors = [], message = "", failure = null } = {}) {
  state.problems = { errors: errors || [], message: message || "", failure };
  draw();
}

export function clearProblems() {
  state.problems = null;
  draw();
}

// kind: "ok" | "error"; ok notices fade after a while, errors stay until dismissed or replaced.
export function notify(kind, text) {
  clearTimeout(state.noticeTimer);
  state.notice = { kind, text };
  if (kind === "ok") state.noticeTimer = setTimeout(() => clearNotice(), 10000);
  draw();
}

export function clearNotice() {
  clearTimeout(state.noticeTimer);
  state.notice = null;
  draw();
}

function draw() {
  const parts = [];
  const { notice, problems } = state;
  if (notice) {
    parts.push(
      h(
        `div.banner.${notice.kind === "ok" ? "banner-ok" : "banner-error"}`,
        { testid: "action-result", role: notice.kind === "ok" ? "status" : "alert", data: { kind: notice.kind } },
        h("span.banner-text", notice.text),
        h("button.banner-close", { type: "button", title: "Dismiss", "aria-label": "Dismiss", data: { dismiss: "notice" } }, "×"),
      ),
    );
  }
  if (problems && problems.failure) {
    parts.push(
      h(
        "div.banner.banner-error",
        { testid: "load-error", role: "alert" },
        h("strong", "Could not load this page's data. "),
        h("span", problems.failure.message),
        h("span.muted", " Retrying…"),
      ),
    );
  }
  if (problems && problems.errors.length) {
    const n = problems.errors.length;
    parts.push(
      h(
        "div.banner.banner-warn",
        { testid: "error-banner", role: "alert" },
        h("strong", `${n} ${n === 1 ? "node is" : "nodes are"} not answering`),
        h("span", " — the page shows what the others report."),
        h(
          "ul",
          problems.errors.map((e) =>
            h(
              "li",
              { testid: "unreachable-node", data: { address: e.address } },
              h("code", e.address),
              ` (${role(e.address)}): `,
              e.error || "no answer",
            ),
          ),
        ),
      ),
    );
  } else if (problems && problems.message) {
    parts.push(h("div.banner.banner-warn", { testid: "warning-banner", role: "alert" }, problems.message));
  }
  render(document.getElementById("banners"), parts);
}

document.addEventListener("click", (event) => {
  const btn = event.target.closest("[data-dismiss='notice']");
  if (btn) clearNotice();
});

// address -> error text, for marking rows "not answering".
export function unansweredMap(errors) {
  const map = new Map();
  for (const e of errors || []) map.set(e.address, e.error || "no answer");
  return map;
}
