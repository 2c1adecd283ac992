// headline: turns a text and its word statistics into a headline.
// A weft step in JavaScript, built with `weft plugin build`.

import { defineStep, fatal } from './weft.js';
import { headline } from './headline.js';

export const step = defineStep(
  {
    name: 'headline',
    version: '1.0.0',
    description: 'Turns a text and its most frequent words into a headline',
    inputSchema: {
      type: 'object',
      required: ['text', 'top'],
      properties: {
        text: { type: 'string' },
        words: { type: 'integer' },
        top: { type: 'array', items: { type: 'string' } },
      },
    },
  },
  (ctx, input) => {
    if (input.top.length === 0) {
      throw fatal('no_words', 'there is nothing to make a headline of');
    }
    ctx.log('info', `headline from ${input.top.length} words`);
    return headline(input.text, input.top, input.words);
  },
);
