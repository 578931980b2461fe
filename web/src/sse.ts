import { createParser } from 'eventsource-parser';
import { api, stream, type Schemas } from './api';

/** One frame of a run stream: `id: <seq>`, `event: <kind>`, `data: {"seq","kind","data"}` — a
 * transcript event (`GET /v1/runs/{id}/events`) without its `created_at`. */
export type RunEvent = Pick<Schemas['RunEvent'], 'seq' | 'kind' | 'data'>;

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
  const body = await stream(
    api.GET('/v1/runs/{id}/stream', {
      params: { path: { id: runId }, query: { from_seq: from } },
      headers: { accept: 'text/event-stream' },
      parseAs: 'stream',
      signal,
    }),
  );
  await pump(body, onEvent);
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
