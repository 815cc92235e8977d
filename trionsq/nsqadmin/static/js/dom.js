// Small DOM helpers: build elements without innerHTML, and patch a rendered tree in place
// (so that polling re-renders keep element identity, focus and hover state).

const SVG_NS = "http://www.w3.org/2000/svg";
const SVG_TAGS = new Set(["svg", "polyline", "polygon", "line", "circle", "path", "rect", "g", "text", "title"]);

function append(el, child) {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) {
    for (const c of child) append(el, c);
  } else if (child instanceof Node) {
    el.appendChild(child);
  } else {
    el.appendChild(document.createTextNode(String(child)));
  }
}

// h("td.num", {title: "x", dataset: {testid: "depth"}}, "1,234")
// Attribute values null/undefined/false are left out; `true` sets an empty attribute.
export function h(spec, attrs, ...children) {
  if (attrs === null || typeof attrs !== "object" || Array.isArray(attrs) || attrs instanceof Node) {
    if (attrs !== undefined) children.unshift(attrs);
    attrs = {};
  }
  const [tag, ...classes] = spec.split(".");
  const svg = SVG_TAGS.has(tag);
  const el = svg ? document.createElementNS(SVG_NS, tag) : document.createElement(tag);
  if (classes.length) el.setAttribute("class", classes.join(" "));
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") {
      const extra = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
      if (extra) el.setAttribute("class", [el.getAttribute("class"), extra].filter(Boolean).join(" "));
    } else if (key === "testid") {
      el.setAttribute("data-testid", value);
    } else if (key === "data") {
      for (const [k, v] of Object.entries(value)) {
        if (v !== null && v !== undefined) el.setAttribute(`data-${k}`, String(v));
      }
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

// Patch `target` so that it looks like `source` (same tag assumed), reusing nodes by position.
// Form fields the user is typing into keep their value.
export function morph(target, source) {
  syncAttributes(target, source);
  const want = Array.from(source.childNodes);
  const have = Array.from(target.childNodes);
  for (let i = 0; i < want.length; i++) {
    const next = want[i];
    const cur = have[i];
    if (!cur) {
      target.appendChild(next);
    } else if (!sameKind(cur, next)) {
      target.replaceChild(next, cur);
    } else if (cur.nodeType === Node.TEXT_NODE) {
      if (cur.nodeValue !== next.nodeValue) cur.nodeValue = next.nodeValue;
    } else if (cur.nodeType === Node.ELEMENT_NODE) {
      morph(cur, next);
    }
  }
  for (let i = have.length - 1; i >= want.length; i--) target.removeChild(have[i]);
}

function sameKind(a, b) {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType !== Node.ELEMENT_NODE) return true;
  if (a.namespaceURI !== b.namespaceURI || a.tagName !== b.tagName) return false;
  // Rows keyed by data-key are only patched into a row with the same key.
  return (a.getAttribute("data-key") || "") === (b.getAttribute("data-key") || "");
}

function syncAttributes(target, source) {
  for (const attr of Array.from(target.attributes)) {
    if (!source.hasAttribute(attr.name)) target.removeAttribute(attr.name);
  }
  for (const attr of Array.from(source.attributes)) {
    if (target.getAttribute(attr.name) !== attr.value) target.setAttribute(attr.name, attr.value);
  }
}

// Replace the content of `container` with `children`, patching what is already there.
export function render(container, ...children) {
  const fresh = container.cloneNode(false);
  append(fresh, children);
  morph(container, fresh);
}
