// nsqadmin's single-page app: client-side routing under the base path, one polling loop per
// page, and click delegation for the action buttons (data-action="...").

import { config, pagePath } from "./config.js";
import { clearNotice, clearProblems, setProblems } from "./banners.js";
import { clear, h } from "./dom.js";
import * as topicsPage from "./pages/topics.js";
import * as topicPage from "./pages/topic.js";
import * as channelPage from "./pages/channel.js";
import * as nodesPage from "./pages/nodes.js";
import * as nodePage from "./pages/node.js";
import * as counterPage from "./pages/counter.js";
import * as lookupPage from "./pages/lookup.js";

const ROUTES = [
  { re: /^\/?$/, page: topicsPage, nav: "topics" },
  { re: /^\/topics\/?$/, page: topicsPage, nav: "topics" },
  { re: /^\/topics\/([^/]+)\/([^/]+)\/?$/, page: channelPage, nav: "topics", keys: ["topic", "channel"] },
  { re: /^\/topics\/([^/]+)\/?$/, page: topicPage, nav: "topics", keys: ["topic"] },
  { re: /^\/nodes\/?$/, page: nodesPage, nav: "nodes" },
  { re: /^\/nodes\/([^/]+)\/?$/, page: nodePage, nav: "nodes", keys: ["node"] },
  { re: /^\/counter\/?$/, page: counterPage, nav: "counter" },
  { re: /^\/lookup\/?$/, page: lookupPage, nav: "lookup" },
];

const app = document.getElementById("app");
let current = null;

function routeFor(pathname) {
  let path = pathname;
  if (config.basePath && path.startsWith(config.basePath)) path = path.slice(config.basePath.length);
  for (const route of ROUTES) {
    const m = route.re.exec(path);
    if (m) {
      const params = {};
      (route.keys || []).forEach((key, i) => {
        params[key] = decodeURIComponent(m[i + 1]);
      });
      return { route, params };
    }
  }
  return null;
}

// One page at a time: it renders into `root`, and gets polled via ctx.
class PageContext {
  constructor(root) {
    this.root = root;
    this.timer = null;
    this.stopped = false;
    this.loading = null;
    this.load = null;
  }

  // Run `load` now and every config.refreshMs; it returns {errors, message} for the banner.
  poll(load) {
    this.load = load;
    return this.refresh();
  }

  async refresh() {
    if (this.stopped || !this.load) return;
    clearTimeout(this.timer);
    if (this.loading) {
      // Let the running load finish, then go again right away.
      await this.loading.catch(() => {});
      if (this.stopped) return;
    }
    this.loading = (async () => {
      try {
        const result = (await this.load()) || {};
        if (this.stopped) return;
        setProblems({ errors: result.errors, message: result.message });
        setLive(true);
      } catch (err) {
        if (this.stopped) return;
        setProblems({ failure: err });
        setLive(false, err.message);
      }
    })();
    await this.loading;
    this.loading = null;
    if (!this.stopped) this.timer = setTimeout(() => this.refresh(), config.refreshMs);
  }

  // After an action that removed this page's subject: keep its outcome in the banner.
  navigate(path) {
    navigate(pagePath(path), { keepNotice: true });
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

function setLive(ok, why) {
  const el = document.querySelector("[data-testid='live-indicator']");
  if (!el) return;
  el.classList.toggle("down", !ok);
  el.title = ok
    ? `Live: refreshed every ${config.refreshMs / 1000}s`
    : `Not updating: ${why || "nsqadmin does not answer"}`;
  el.querySelector(".live-text").textContent = ok ? "live" : "offline";
}

function show() {
  if (current) {
    current.ctx.stop();
    if (current.page.unmount) current.page.unmount();
  }
  clearProblems();
  clear(app);
  const found = routeFor(window.location.pathname);
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("active", Boolean(found && a.dataset.nav === found.route.nav));
  }
  if (!found) {
    document.title = "nsqadmin · not found";
    app.appendChild(
      h(
        "section.page",
        { testid: "page-not-found" },
        h("h1", "Page not found"),
        h("p", "nsqadmin has no page at ", h("code", window.location.pathname), "."),
        h("p", h("a", { href: pagePath("/topics"), "data-link": true }, "Go to the topics")),
      ),
    );
    current = null;
    return;
  }
  const root = h("section.page");
  app.appendChild(root);
  const ctx = new PageContext(root);
  current = { page: found.route.page, ctx };
  found.route.page.mount(root, found.params, ctx);
}

export function navigate(url, { replace = false, keepNotice = false } = {}) {
  if (replace) window.history.replaceState({}, "", url);
  else window.history.pushState({}, "", url);
  if (!keepNotice) clearNotice();
  show();
  window.scrollTo(0, 0);
}

// Same-origin links under the base path are routed here instead of reloading the page.
document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const action = event.target.closest("[data-action]");
  if (action && current && app.contains(action)) {
    event.preventDefault();
    const handler = current.page.actions && current.page.actions[action.dataset.action];
    if (handler && !action.disabled) handler(action.dataset, current.ctx, action);
    return;
  }
  const link = event.target.closest("a[href]");
  if (!link || link.target || link.hasAttribute("download")) return;
  const url = new URL(link.href, window.location.href);
  if (url.origin !== window.location.origin) return;
  if (!routeFor(url.pathname)) return;
  if (config.basePath && !url.pathname.startsWith(config.basePath)) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener("popstate", () => show());

document.querySelector("[data-testid='version']").textContent = config.version ? `v${config.version}` : "";
show();
