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
// for an error that trying again cannot fix.

import { log } from 'weft:plugin/log@0.1.0';

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
      let output;
      try {
        output = run(context, value);
      } catch (e) {
        if (e instanceof StepError) throw failure(e);
        throw failure(retryable('exception', `${e && e.name}: ${e && e.message}`, { stack: String(e && e.stack) }));
      }
      const text = JSON.stringify(output);
      if (text === undefined) {
        throw failure(fatal('invalid_output', 'the step returned nothing JSON can hold'));
      }
      return text;
    },
  };
}
