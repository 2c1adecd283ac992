import { test } from 'node:test';
import assert from 'node:assert/strict';
import { headline } from './headline.js';

test('names the top words and the count', () => {
  assert.deepEqual(headline('a b c', ['cat', 'dog'], 3), { headline: 'Cat, Dog: 3 words', length: 5 });
});

test('counts the words when not told', () => {
  assert.equal(headline('one two  three', ['one']).headline, 'One: 3 words');
});
