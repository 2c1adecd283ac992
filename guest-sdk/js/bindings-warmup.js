
// weft: appended by `weft plugin build` to the bindings componentize-js
// generates, so it runs once, at build time, before the snapshot every
// instance starts from. The engine makes its standard classes (typed
// arrays, DataView, Promise, async functions, errors and their saved
// stacks) on first use in each global; the bindings' global is not the
// step's, and without this each call, in its fresh instance, made them
// again: about half of a small step's call. It defines nothing outside its
// block; it only uses what each call's bindings use.
{
  const warmBytes = new Uint8Array(new ArrayBuffer(16), 0, 8);
  new DataView(warmBytes.buffer).setUint32(0, warmBytes.length, true);
  new DataView(warmBytes.buffer).getInt32(4, true);
  String.fromCharCode(...warmBytes.subarray(0, 2));
  'warm'.charCodeAt(0);
  [warmBytes.length].map((n) => n + 1);
  // An await, as each call of an async step's export makes. Jobs queued at build time run
  // then: one that busy-loops for seconds here adds nothing to a call.
  (async () => await new Promise((resolve) => resolve(warmBytes.length)))();
  try {
    throw new TypeError('warm');
  } catch (e) {
    String(e.stack);
  }
}
