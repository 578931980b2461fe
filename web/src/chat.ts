/** What the playground shows of one streamed `/v1/llm/chat` answer. */
export interface ChatAnswer {
  provider: string | null;
  model: string | null;
  fallbacks: { provider: string; model: string; code: string; message: string }[];
  text: string;
  toolCalls: { id: string; name: string; input: string }[];
  finishReason: string | null;
  usage: Record<string, number> | null;
  error: string | null;
  done: boolean;
}

export const emptyAnswer: ChatAnswer = {
  provider: null,
  model: null,
  fallbacks: [],
  text: '',
  toolCalls: [],
  finishReason: null,
  usage: null,
  error: null,
  done: false,
};

/** Applies one event of the native chat stream. */
export function applyChat(a: ChatAnswer, event: string, raw: string): ChatAnswer {
  const d = JSON.parse(raw);
  switch (event) {
    case 'provider_fallback':
      return { ...a, fallbacks: [...a.fallbacks, d] };
    case 'provider_chosen':
      return { ...a, provider: d.provider, model: d.model };
    case 'content_block_start':
      if (d.block?.type === 'tool_use') {
        return { ...a, toolCalls: [...a.toolCalls, { id: d.block.id, name: d.block.name, input: '' }] };
      }
      return a;
    case 'content_block_delta': {
      const delta = d.delta ?? {};
      if (delta.type === 'text_delta') return { ...a, text: a.text + delta.text };
      if (delta.type === 'input_json_delta' && a.toolCalls.length > 0) {
        const calls = [...a.toolCalls];
        const last = calls[calls.length - 1];
        calls[calls.length - 1] = { ...last, input: last.input + delta.partial_json };
        return { ...a, toolCalls: calls };
      }
      return a;
    }
    case 'message_delta':
      return { ...a, finishReason: d.finish_reason ?? null, usage: d.usage ?? null };
    case 'done':
      return { ...a, done: true };
    case 'error':
      return { ...a, error: `${d.error?.code}: ${d.error?.message}`, done: true };
    default:
      return a;
  }
}
