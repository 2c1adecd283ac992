// `{{name}}`: a weft step in JavaScript. Build it with `weft plugin
// build`, test its logic with `node --test`.

import { defineStep, fatal, kv } from './weft.js';
import { greeting } from './greet.js';

export const step = defineStep(
  {
    name: '{{name}}',
    version: '0.1.0',
    description: 'A weft step',
    inputSchema: {
      type: 'object',
      required: ['name'],
      properties: { name: { type: 'string' } },
    },
  },
  async (ctx, input) => {
    const text = greeting(input.name);
    if (text === null) throw fatal('empty_name', 'name must not be empty');
    ctx.log('info', text);
    // Key-value writes commit with the step's result, exactly once.
    const greetings = Number(kv.get('greetings') ?? '0') + 1;
    kv.set('greetings', String(greetings));
    // HTTP calls go to destinations the workflow grants (`allow: {http:
    // [...]}`); see "Outgoing HTTP" in docs/steps.md. The build imports
    // wasi:http only for a project that makes them.
    return { greeting: text, greetings };
  },
);
