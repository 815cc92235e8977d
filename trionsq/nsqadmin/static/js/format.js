// Number, duration and rate formatting, the way an operator reads them.

const INT = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const DEC1 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1, minimumFractionDigits: 1 });

// 1234567 -> "1,234,567"; missing values -> "–"
export function commafy(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return "–";
  return INT.format(Number(n));
}

// Seconds -> "12s", "3m 12s", "2h 5m", "3d 4h"
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  let s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const hr = Math.floor(s / 3600);
  s -= hr * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

// Nanoseconds -> "850µs", "12.3ms", "1.2s", "2m 3s"
export function nanos(ns) {
  if (ns === null || ns === undefined || !Number.isFinite(Number(ns))) return "–";
  ns = Number(ns);
  if (ns < 1e3) return `${Math.round(ns)}ns`;
  if (ns < 1e6) return `${trim(ns / 1e3)}µs`;
  if (ns < 1e9) return `${trim(ns / 1e6)}ms`;
  if (ns < 60e9) return `${trim(ns / 1e9)}s`;
  return duration(ns / 1e9);
}

function trim(x) {
  return x >= 100 ? String(Math.round(x)) : x.toFixed(1).replace(/\.0$/, "");
}

// Messages per second -> "0/s", "3.5/s", "1,250/s"
export function rate(perSecond) {
  if (perSecond === null || perSecond === undefined || !Number.isFinite(perSecond)) return "–";
  if (perSecond === 0) return "0/s";
  if (perSecond < 100) return `${DEC1.format(perSecond).replace(/\.0$/, "")}/s`;
  return `${INT.format(perSecond)}/s`;
}

// 0.99 -> "p99", 0.999 -> "p99.9", 0.5 -> "p50"
export function quantileLabel(q) {
  const pct = Math.round(Number(q) * 1000) / 10;
  return `p${String(pct).replace(/\.0$/, "")}`;
}

// How long a client has been connected, from Go's `connected` (ns) or `connect_ts` (unix s).
export function connectedFor(client) {
  if (client.connected !== undefined && client.connected !== null && client.connected > 0) {
    return duration(client.connected / 1e9);
  }
  if (client.connect_ts) return duration(Date.now() / 1000 - client.connect_ts);
  return "–";
}

export function plural(n, word, many) {
  return `${commafy(n)} ${n === 1 ? word : many || `${word}s`}`;
}
