// nsqadmin's settings for this page: what the server put in window.NSQADMIN, plus the
// page URL's ?refresh=<ms> (the polling interval; tests use a short one).

const raw = window.NSQADMIN && typeof window.NSQADMIN === "object" ? window.NSQADMIN : {};

function refreshFromUrl() {
  const value = Number(new URLSearchParams(window.location.search).get("refresh"));
  return Number.isFinite(value) && value >= 100 ? Math.floor(value) : 2000;
}

export const config = {
  version: raw.version || "",
  basePath: String(raw.basePath || "").replace(/\/+$/, ""),
  isAdmin: raw.isAdmin !== false,
  nsqlookupd: Array.isArray(raw.nsqlookupd) ? raw.nsqlookupd : [],
  nsqdAddresses: Array.isArray(raw.nsqdAddresses) ? raw.nsqdAddresses : [],
  graphEnabled: Boolean(raw.graphEnabled),
  statsdInterval: raw.statsdInterval || 0,
  aclHttpHeader: raw.aclHttpHeader || "",
  refreshMs: refreshFromUrl(),
  // How many points a rate chart keeps.
  chartPoints: 60,
};

// A path inside nsqadmin ("/topics/x") -> the URL under the base path.
export function pagePath(path) {
  return `${config.basePath}${path}`;
}

export function apiPath(path) {
  return `${config.basePath}/api${path}`;
}

export const enc = encodeURIComponent;
