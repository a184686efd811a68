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
