import { describe, expect, it } from 'vitest';
import { fromText, toText } from './rawtext';

const agent = { system_prompt: 'Be brief.\nAlways.', tools: ['Context'], model: 'mock-1', max_iterations: 8, tier: null };

describe('raw views', () => {
  it('round-trip a definition through JSON and YAML', () => {
    for (const fmt of ['json', 'yaml'] as const) {
      expect(fromText(toText(agent, fmt), fmt)).toEqual(agent);
    }
  });
  it('print YAML with sorted keys', () => {
    expect(toText({ b: 1, a: [2] }, 'yaml')).toBe('a:\n  - 2\nb: 1\n');
  });
  it('refuse what is not an object', () => {
    expect(() => fromText('- a\n- b\n', 'yaml')).toThrow('must be an object');
    expect(() => fromText('{', 'json')).toThrow();
  });
});
