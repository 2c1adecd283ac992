// The step's logic, free of weft, so plain Node.js can test it.

export function headline(text, top, words) {
  const title = top.map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join(', ');
  const count = words ?? text.split(/\s+/).filter(Boolean).length;
  return { headline: `${title}: ${count} words`, length: text.length };
}
