// Cluster-changing actions: ask for confirmation naming the target, call the API, then say
// what happened (or why not) in the banner and refresh the page.

import { notify } from "./banners.js";

// spec: {confirm, call: async () => data, done: text | (data) => text,
//        succeeded: (data) => void (right away), after: async (data) => void (then, awaited)}
export async function runAction(spec) {
  if (spec.confirm && !window.confirm(spec.confirm)) return false;
  let data;
  try {
    data = await spec.call();
  } catch (err) {
    notify("error", `${spec.failed || "Action failed"}: ${err.message}`);
    return false;
  }
  let text = typeof spec.done === "function" ? spec.done(data) : spec.done;
  const warning = data && typeof data.message === "string" && data.message ? data.message : "";
  if (warning) {
    notify("error", `${text}, but not everywhere — ${warning}`);
  } else {
    notify("ok", text);
  }
  if (spec.succeeded) spec.succeeded(data);
  if (spec.after) {
    try {
      await spec.after(data);
    } catch {
      // The next poll will show the state.
    }
  }
  return true;
}
