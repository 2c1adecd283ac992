// fresh-js: keeps state in its module, in the global object and on the
// standard classes, and fails `stale` if a call finds any left by another.
// The tests call it many times: each call must start from the build's
// snapshot, with nothing of the calls before.

import { defineStep, fatal } from './weft.js';

let calls = 0;
const seen = [];

export const step = defineStep(
  {
    name: 'fresh-js',
    version: '1.0.0',
    description: 'Fails if a call sees what another call left',
  },
  async (ctx, input) => {
    calls += 1;
    seen.push(input.n);
    const marks = [
      globalThis.weftMark,
      Array.prototype.weftMark,
      Object.prototype.weftMark,
      Uint8Array.prototype.weftMark,
      Promise.prototype.weftMark,
      JSON.weftMark,
    ].filter((m) => m !== undefined);
    if (calls !== 1 || seen.length !== 1 || marks.length > 0) {
      throw fatal('stale', `calls ${calls}, seen [${seen}], marks [${marks}]`);
    }
    globalThis.weftMark = input.n;
    Array.prototype.weftMark = input.n;
    Object.prototype.weftMark = input.n;
    Uint8Array.prototype.weftMark = input.n;
    Promise.prototype.weftMark = input.n;
    JSON.weftMark = input.n;
    await Promise.resolve(input.n);
    return { n: input.n, fresh: true };
  },
);
