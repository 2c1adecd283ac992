// `behave-js`: the behaviour test's step in JavaScript (see ../README.md).

import { defineStep, fatal, kv, outbox, secrets } from './weft.js';

export const step = defineStep(
  { name: 'behave-js', version: '1.0.0', description: "The behaviour test's step" },
  async (ctx, input) => {
    switch (input.op) {
      case 'count': {
        const count = Number(kv.get('count') ?? '0') + 1;
        kv.set('count', String(count));
        return { count };
      }
      case 'emit':
        return { id: outbox.emit(input.channel, { from: 'js', run: ctx.runId }) };
      case 'fetch': {
        const answer = await fetch(input.url);
        return { status: answer.status, body: await answer.text() };
      }
      case 'secret': {
        const value = secrets.get(input.name);
        ctx.log('info', `the secret is ${value}`);
        return { length: value.length };
      }
      default:
        throw fatal('unknown_op', `no op \`${input.op}\``);
    }
  },
);
