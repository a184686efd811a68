// What every page module needs: an element by id, a new element with its properties and
// children (text goes in as text, never as HTML), and the request headers with the API key the
// user typed in the chat form, if any.
export const $ = (id) => document.getElementById(id);

export function el(tag, props = {}, children = []) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

export function apiHeaders(extra = { "Content-Type": "application/json" }) {
  const key = $("key").value;
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

// An SVG element with its attributes (presentation attributes, not inline style: the CSP
// refuses those) and children; text goes in as text.
export function svg(tag, attrs = {}, children = []) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}
