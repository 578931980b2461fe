import { createParser } from 'eventsource-parser';
import { toError } from './api';

/** One frame of a run stream: `id: <seq>`, `event: <kind>`, `data: {"seq","kind","data"}`. */
export interface RunEvent {
  seq: number;
  kind: string;
  data: Record<string, unknown>;
}

/**
 * Reads a run's SSE stream with `fetch` (so the session cookie goes along, and a POST stream
 * would work too), calling `onEvent` per frame. Resolves when the stream ends (the run ended);
 * rejects on an HTTP error or a broken connection. `from` is the first seq wanted.
 */
export async function readRunStream(
  runId: string,
  from: number,
  onEvent: (e: RunEvent) => void,
  signal: AbortSignal,
): Promise<void> {
  const res = await fetch(`/v1/runs/${encodeURIComponent(runId)}/stream?from_seq=${from}`, {
    credentials: 'same-origin',
    headers: { accept: 'text/event-stream' },
    signal,
  });
  if (!res.ok) throw await toError(res);
  if (!res.body) throw new Error('the stream has no body');
  await pump(res.body, onEvent);
}

/** Feeds a run stream's SSE body through the parser until it ends. */
export async function pump(
  body: ReadableStream<Uint8Array>,
  onEvent: (e: RunEvent) => void,
): Promise<void> {
  await readSse(body, (event, data) => {
    if (event === 'error') {
      throw new Error(`the stream reported an error: ${data}`);
    }
    onEvent(JSON.parse(data) as RunEvent);
  });
}

/** Reads any SSE body, calling `onMessage(event name, data)` per event, until it ends. */
export async function readSse(
  body: ReadableStream<Uint8Array>,
  onMessage: (event: string, data: string) => void,
): Promise<void> {
  const parser = createParser({
    onEvent(msg) {
      onMessage(msg.event ?? 'message', msg.data);
    },
  });
  const reader = body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      parser.feed(decoder.decode());
      return;
    }
    parser.feed(decoder.decode(value, { stream: true }));
  }
}
