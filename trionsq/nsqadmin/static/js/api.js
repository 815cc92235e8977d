// Talking to nsqadmin's JSON API, turning every failure into a sentence a person understands.

import { apiPath, config } from "./config.js";

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const CODES = {
  FORBIDDEN:
    "nsqadmin refused the action: only its admin users may change the cluster" +
    (config.aclHttpHeader ? ` (checked with the ${config.aclHttpHeader} header)` : "") +
    ", and this request was not from one of them.",
  TOPIC_NOT_FOUND: "That topic does not exist (any more).",
  CHANNEL_NOT_FOUND: "That channel does not exist (any more).",
  NODE_NOT_FOUND: "No nsqd with that address is known to nsqadmin.",
  INVALID_ACTION: "nsqadmin does not know that action.",
  INVALID_TOPIC: "That is not a valid topic name (1–64 characters: letters, digits, . _ - and an optional #ephemeral).",
  INVALID_CHANNEL: "That is not a valid channel name (1–64 characters: letters, digits, . _ - and an optional #ephemeral).",
  INVALID_ARG_TOPIC: "That is not a valid topic name.",
  INVALID_ARG_CHANNEL: "That is not a valid channel name.",
  MISSING_ARG_TOPIC: "A topic name is needed.",
  MISSING_ARG_CHANNEL: "A channel name is needed.",
  MISSING_ARG_NODE: "A node is needed.",
  INVALID_BODY: "nsqadmin could not read the request.",
  NOT_FOUND: "nsqadmin has no such API route.",
  METHOD_NOT_ALLOWED: "nsqadmin does not allow that method here.",
};

// "UPSTREAM_ERROR: ..." -> a sentence; known codes -> their explanation; else the text itself.
export function explain(message, status) {
  const text = String(message || "").trim();
  if (!text) return status ? `nsqadmin answered with HTTP ${status} and no explanation.` : "Unknown error.";
  if (text.startsWith("UPSTREAM_ERROR")) {
    const rest = text.replace(/^UPSTREAM_ERROR:?\s*/, "");
    return `No nsqd or nsqlookupd answered nsqadmin${rest ? `: ${rest}` : "."}`;
  }
  const code = text.split(/[:\s]/)[0];
  if (CODES[code]) return text === code ? CODES[code] : `${CODES[code]} (${text})`;
  return text;
}

// A 404, or (as Go's nsqadmin answers for a topic lookupd does not know) a 502 whose only
// upstream failures are TOPIC_NOT_FOUND / CHANNEL_NOT_FOUND.
export function isNotFound(err) {
  if (!(err instanceof ApiError)) return false;
  if (err.status === 404) return true;
  const errors = (err.data && err.data.errors) || [];
  if (err.status === 502 && errors.length) {
    return errors.every((e) => /(TOPIC|CHANNEL)_NOT_FOUND/.test(String(e.error)));
  }
  return false;
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(apiPath(path), init);
  } catch (err) {
    throw new ApiError(
      `nsqadmin at ${window.location.host} does not answer (${err.message || "network error"}).`,
      0,
      "NETWORK",
    );
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const message = data && typeof data === "object" ? data.message : text;
    const err = new ApiError(explain(message, response.status), response.status, String(message || "").split(/[:\s]/)[0]);
    err.data = data;
    throw err;
  }
  return data === null || typeof data !== "object" ? {} : data;
}

export const api = {
  get: (path) => request("GET", path),
  post: (path, body) => request("POST", path, body),
  del: (path, body) => request("DELETE", path, body),
};
