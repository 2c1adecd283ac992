import { test } from 'node:test';
import assert from 'node:assert/strict';
import { greeting } from './greet.js';

test('greets by name', () => {
  assert.equal(greeting('Ada'), 'Hello, Ada!');
});

test('refuses an empty name', () => {
  assert.equal(greeting(' '), null);
});
