// `{{name}}`: a weft step in JavaScript. Build it with `weft plugin
// build`, test its logic with `node --test`.

import { defineStep, fatal } from './weft.js';
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
  (ctx, input) => {
    const text = greeting(input.name);
    if (text === null) throw fatal('empty_name', 'name must not be empty');
    ctx.log('info', text);
    return { greeting: text };
  },
);
