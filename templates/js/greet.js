// The step's logic, free of weft, so plain Node.js can test it.

export function greeting(name) {
  if (name.trim() === '') return null;
  return `Hello, ${name}!`;
}
