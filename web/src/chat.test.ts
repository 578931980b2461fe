import { describe, expect, it } from 'vitest';
import { applyChat, emptyAnswer } from './chat';

describe('the playground stream', () => {
  it('shows the fallbacks, the provider chosen, the text and the usage', () => {
    const events: [string, unknown][] = [
      ['provider_fallback', { provider: 'fake', model: 'm', code: 'upstream_error', message: 'status 500' }],
      ['provider_chosen', { provider: 'mock', model: 'mock-1' }],
      ['content_block_start', { index: 0, block: { type: 'text' } }],
      ['content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'echo: ' } }],
      ['content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'hi' } }],
      ['content_block_stop', { index: 0 }],
      ['message_delta', { finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 2 } }],
      ['done', {}],
    ];
    const a = events.reduce((acc, [e, d]) => applyChat(acc, e, JSON.stringify(d)), emptyAnswer);
    expect(a).toMatchObject({
      provider: 'mock',
      model: 'mock-1',
      text: 'echo: hi',
      finishReason: 'stop',
      done: true,
      error: null,
    });
    expect(a.fallbacks).toHaveLength(1);
  });

  it('collects a tool call and ends on an error', () => {
    let a = applyChat(emptyAnswer, 'content_block_start', JSON.stringify({ index: 0, block: { type: 'tool_use', id: 't', name: 'f' } }));
    a = applyChat(a, 'content_block_delta', JSON.stringify({ index: 0, delta: { type: 'input_json_delta', partial_json: '{"a"' } }));
    a = applyChat(a, 'content_block_delta', JSON.stringify({ index: 0, delta: { type: 'input_json_delta', partial_json: ':1}' } }));
    a = applyChat(a, 'error', JSON.stringify({ error: { code: 'upstream_error', message: 'broken' } }));
    expect(a.toolCalls).toEqual([{ id: 't', name: 'f', input: '{"a":1}' }]);
    expect(a.error).toBe('upstream_error: broken');
    expect(a.done).toBe(true);
  });
});
