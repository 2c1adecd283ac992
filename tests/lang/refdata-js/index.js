// refdata-js: reads a snapshot store and keeps a key that expires; what
// the tests use to hold the JavaScript helpers to the contract.

import { defineStep, kv, snapshot } from './weft.js';

export const step = defineStep(
  {
    name: 'refdata-js',
    version: '1.0.0',
    description: 'Reads reference data and keeps a key with a time to live',
  },
  (ctx, input) => {
    const value = snapshot.get(input.store, input.key);
    const keys = snapshot.keys(input.store, input.prefix ?? '', 10);
    const seen = kv.get('seen-js') ?? null;
    if (input.ttlMs !== undefined) {
      kv.set('seen-js', 'yes', { ttlMs: input.ttlMs });
    }
    return { value: value ?? null, keys, seen };
  },
);
