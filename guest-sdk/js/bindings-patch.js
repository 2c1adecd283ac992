// weft: added by `weft plugin build` to its copy of componentize-js's
// `componentize.js` (componentize-weft.js), which runs it on the bindings
// it generates. Their `run` export awaited the step's answer, and
// `weft.js` answers a synchronous step's call with a string: awaiting it
// made a promise (with a captured stack), a reaction job and a turn of the
// event loop in every call, about a tenth of a small step's call. The
// export now awaits the answer only if it is a promise, as an async
// step's is.
const WEFT_AWAITED_RUN = /const (hostRet\d+) = await (step\d+Run\(\{[^]*?\}, result\d+\);)/g;

function weftBindings(bindings) {
  const found = bindings.match(WEFT_AWAITED_RUN) ?? [];
  if (found.length !== 1) {
    throw new Error(
      `weft: the bindings componentize-js generated await the step's \`run\` ${found.length} times, not once; weft's change to them does not fit this componentize-js`,
    );
  }
  return bindings.replace(
    WEFT_AWAITED_RUN,
    (_, answer, call) =>
      `let ${answer} = ${call}\n    if (${answer} !== null && (typeof ${answer} === 'object' || typeof ${answer} === 'function') && typeof ${answer}.then === 'function') ${answer} = await ${answer};`,
  );
}
