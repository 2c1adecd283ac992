// weft's helper for steps written in JavaScript (built with
// componentize-js). It turns a plain function over JSON values into the
// `weft:plugin/step` export: the input is parsed, the return value
// serialised, and errors are typed. `weft plugin build` supplies this
// file; a plugin does not copy it.
//
//   import { defineStep, fatal } from './weft.js';
//
//   export const step = defineStep(
//     { name: 'greet', version: '1.0.0',
//       inputSchema: { type: 'object', required: ['name'] } },
//     (ctx, input) => {
//       if (!input.name) throw fatal('empty_name', 'name must not be empty');
//       ctx.log('info', `greeting ${input.name}`);
//       return { greeting: `Hello, ${input.name}!` };
//     });
//
// An uncaught exception fails the attempt as retryable (`exception`, with
// the stack in the details), as a panic does in Rust; throw `fatal(...)`
// for an error that trying again cannot fix. A step may be `async` (it
// may `await fetch(...)`).
//
// The host's capabilities, the same in every language:
//
// - `kv.get(key)`, `kv.set(key, value, { ttlMs })`, `kv.delete(key)`,
//   `kv.keys(prefix, limit)`: the workflow's durable key-value space
//   (writes commit with the step's result; with `ttlMs`, a key expires
//   that many milliseconds after the call);
// - `outbox.emit(channel, payload)`: a message, sent once if the step
//   succeeds;
// - `secrets.get(name)`: a secret the workflow grants the step;
// - `snapshot.get(store, key)`, `snapshot.keys(store, prefix, limit)`:
//   read-only reference data in the snapshot stores the workflow names
//   (`snapshots:`);
// - the global `fetch`: outgoing HTTP to the hosts the workflow grants
//   (`allow: {http: [...]}`). A plugin whose sources call `fetch(` is
//   built against the `http-plugin` world; others have no `fetch`.

import { log } from 'weft:plugin/log@0.3.0';
import {
  get as kvGet,
  set as kvSet,
  delete as kvDelete,
  keys as kvKeys,
} from 'weft:plugin/kv@0.3.0';
import { emit } from 'weft:plugin/outbox@0.3.0';
import { get as secretGet } from 'weft:plugin/secrets@0.3.0';
import { get as snapshotGet, keys as snapshotKeys } from 'weft:plugin/snapshot@0.3.0';

const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error']);

/** An error the step understood: a code, a message, optional details. */
export class StepError extends Error {
  constructor(code, message, { details, retryable = false } = {}) {
    super(`${code}: ${message}`);
    this.code = code;
    this.detail = message;
    this.details = details;
    this.retryable = retryable;
  }
}

/** An error that trying again cannot fix: the step fails at once. */
export function fatal(code, message, details) {
  return new StepError(code, message, { details });
}

/** An error that may go away: the step's retry policy applies. */
export function retryable(code, message, details) {
  return new StepError(code, message, { details, retryable: true });
}

/** The message of an error a host call threw. */
function reason(e) {
  return e && e.payload !== undefined ? String(e.payload) : String(e && e.message);
}

/** The workflow's durable key-value space. */
export const kv = {
  /** The value of `key` (a string), or null. */
  get(key) {
    return kvGet(key) ?? null;
  },
  /**
   * Sets `key` to `value` (a string); committed with the step's result.
   * With `ttlMs` (milliseconds, a number or a BigInt), the key expires that
   * long after the call and then reads as absent; without, never.
   */
  set(key, value, options) {
    const ttl = ttlOf(options?.ttlMs);
    try {
      kvSet(key, value, ttl);
    } catch (e) {
      throw fatal('kv', reason(e));
    }
  },
  /** Removes `key`; committed with the step's result. */
  delete(key) {
    try {
      kvDelete(key);
    } catch (e) {
      throw fatal('kv', reason(e));
    }
  },
  /** Up to `limit` keys that start with `prefix`, in byte order. */
  keys(prefix = '', limit = 1000) {
    return kvKeys(prefix, limit);
  },
};

const U64_MAX = 2n ** 64n - 1n;

/** `ttlMs` as the whole milliseconds (a BigInt, at least 1) `kv.set`
 * takes; undefined for no expiry. */
function ttlOf(ttlMs) {
  if (ttlMs === undefined || ttlMs === null) return undefined;
  const positive = typeof ttlMs === 'bigint' ? ttlMs > 0n : typeof ttlMs === 'number' && ttlMs > 0;
  if (!positive) {
    const shown = typeof ttlMs === 'string' ? JSON.stringify(ttlMs) : String(ttlMs);
    throw fatal('kv', `ttlMs must be a number of milliseconds more than 0, not ${shown}`);
  }
  if (typeof ttlMs === 'bigint') return ttlMs > U64_MAX ? U64_MAX : ttlMs;
  if (ttlMs >= 2 ** 64) return U64_MAX;
  return BigInt(Math.max(1, Math.round(ttlMs)));
}

/** Messages out of the run. */
export const outbox = {
  /** Emits `payload` (a JSON value) on `channel`; returns its id. */
  emit(channel, payload) {
    try {
      return emit(channel, JSON.stringify(payload));
    } catch (e) {
      throw fatal('emit', reason(e));
    }
  },
};

/** The tenant's secrets that the workflow grants the step. */
export const secrets = {
  /** The value of secret `name`. */
  get(name) {
    try {
      return secretGet(name);
    } catch (e) {
      throw fatal('secret', reason(e));
    }
  },
};

/**
 * Read-only reference data: the snapshot stores the workflow names in
 * `snapshots:`. A run reads the revision pinned at its start (unless the
 * workflow asks for `revision: latest`); an expired entry reads as absent.
 */
export const snapshot = {
  /**
   * The value of `key` in `store` (parsed JSON), or `otherwise` (null) if
   * it has none. Throws a fatal `snapshot` error if the workflow does not
   * name `store`.
   */
  get(store, key, otherwise = null) {
    let text;
    try {
      text = snapshotGet(store, key);
    } catch (e) {
      throw fatal('snapshot', reason(e));
    }
    return text === undefined || text === null ? otherwise : JSON.parse(text);
  },
  /** Up to `limit` keys of `store` that start with `prefix`, in byte order. */
  keys(store, prefix = '', limit = 1000) {
    try {
      return snapshotKeys(store, prefix, limit);
    } catch (e) {
      throw fatal('snapshot', reason(e));
    }
  },
};

function failure(error) {
  const val = {
    code: error.code,
    message: error.detail,
    details: error.details === undefined ? undefined : JSON.stringify(error.details),
  };
  return { tag: error.retryable ? 'retryable' : 'fatal', val };
}

/**
 * The `step` export for `run(ctx, input) -> output`, described by `info`
 * ({ name, version, description, inputSchema, outputSchema }; the schemas
 * are JSON Schema, as values).
 */
export function defineStep(info, run) {
  const described = {
    name: info.name,
    version: info.version,
    description: info.description ?? '',
    inputSchema: info.inputSchema === undefined ? undefined : JSON.stringify(info.inputSchema),
    outputSchema: info.outputSchema === undefined ? undefined : JSON.stringify(info.outputSchema),
  };
  return {
    describe() {
      return described;
    },
    run(ctx, input) {
      let value;
      try {
        value = JSON.parse(input);
      } catch (e) {
        throw failure(fatal('invalid_input', `the input is not JSON: ${e.message}`));
      }
      const context = {
        ...ctx,
        log(level, message) {
          log(LEVELS.has(level) ? level : 'info', String(message));
        },
      };
      const caught = (e) => {
        if (e instanceof StepError) return failure(e);
        return failure(retryable('exception', `${e && e.name}: ${e && e.message}`, { stack: String(e && e.stack) }));
      };
      const finish = (output) => {
        const text = JSON.stringify(output);
        if (text === undefined) {
          throw failure(fatal('invalid_output', 'the step returned nothing JSON can hold'));
        }
        return text;
      };
      let output;
      try {
        output = run(context, value);
      } catch (e) {
        throw caught(e);
      }
      if (output && typeof output.then === 'function') {
        return output.then(finish, (e) => {
          throw caught(e);
        });
      }
      return finish(output);
    },
  };
}

// Run once, at build time: this module's top level runs before the
// snapshot every instance starts from. The engine makes its standard
// classes and their methods on first use; made here, they are in the
// snapshot, and a call (each in a fresh instance) does not make them
// again. It uses what a call of `defineStep`'s `run` uses, and what steps
// commonly do, and changes nothing a step can see.
{
  const warm = JSON.parse('{"text":"a b","n":[1,2.5,true,null],"o":{"k":"v"}}');
  const spread = { ...warm, more: Object.keys(warm.o) };
  JSON.stringify(spread);
  const words = warm.text.split(' ').map((w) => w.charAt(0).toUpperCase() + w.slice(1));
  words.filter(Boolean).join(', ').toLowerCase().trim().includes('a');
  new Map([[words[0], 1]]).get(words[0]);
  new Set(words).has(words[1]);
  for (const [k, v] of Object.entries(warm)) String(k) + String(v);
  new RegExp('[a-z]+', 'g');
  Math.max(...warm.n.filter((x) => typeof x === 'number'));
  (async () => await new Promise((resolve) => resolve(words.length)))();
  try {
    throw new StepError('warm', 'warm');
  } catch (e) {
    String(e.stack);
  }
}
