import { useRef, useState, type FormEvent } from 'react';
import { api, stream, type Schemas } from '../api';
import { applyChat, emptyAnswer, type ChatAnswer } from '../chat';
import { readSse } from '../sse';
import { ErrorNote } from '../ErrorNote';

interface Turn {
  role: 'user' | 'assistant';
  content: string;
  answer?: ChatAnswer;
}

/** Chat with any model, alias or tier through `POST /v1/llm/chat`, streamed. */
export function PlaygroundPage() {
  const [model, setModel] = useState('mock-1');
  const [system, setSystem] = useState('');
  const [turns, setTurns] = useState<Turn[]>([]);
  const [input, setInput] = useState('');
  const [live, setLive] = useState<ChatAnswer | null>(null);
  const [error, setError] = useState<string | null>(null);
  const abort = useRef<AbortController | null>(null);

  const send = async (e: FormEvent) => {
    e.preventDefault();
    if (!input.trim() || live) return;
    setError(null);
    const history: Turn[] = [...turns, { role: 'user', content: input }];
    setTurns(history);
    setInput('');
    const messages: Schemas['LlmChatRequest']['messages'] = [
      ...(system ? [{ role: 'system' as const, content: system }] : []),
      ...history.map((t) => ({ role: t.role, content: t.content })),
    ];
    let answer = emptyAnswer;
    setLive(answer);
    abort.current = new AbortController();
    try {
      const body = await stream(
        api.POST('/v1/llm/chat', {
          headers: { accept: 'text/event-stream' },
          body: { model, messages, stream: true },
          parseAs: 'stream',
          signal: abort.current.signal,
        }),
      );
      await readSse(body, (event, data) => {
        answer = applyChat(answer, event, data);
        setLive(answer);
      });
      setTurns([...history, { role: 'assistant', content: answer.text, answer }]);
    } catch (err) {
      if (answer.text) setTurns([...history, { role: 'assistant', content: answer.text, answer }]);
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setLive(null);
      abort.current = null;
    }
  };

  return (
    <section className="playground">
      <h1>Playground</h1>
      <div className="row">
        <label>
          Model <input value={model} onChange={(e) => setModel(e.target.value)} placeholder="a model, alias, provider/model or tier:name" />
        </label>
        <button type="button" onClick={() => setTurns([])} disabled={turns.length === 0 || live !== null}>
          Clear
        </button>
      </div>
      <label className="wide">
        System <textarea rows={2} value={system} onChange={(e) => setSystem(e.target.value)} />
      </label>
      <ol className="terminal" aria-label="Conversation" aria-live="polite">
        {turns.map((t, i) => (
          <li key={i} className={t.role === 'user' ? 't-input' : 't-text'}>
            {t.role === 'user' ? `› ${t.content}` : <Reply answer={t.answer} text={t.content} />}
          </li>
        ))}
        {live && (
          <li className="t-text live">
            <Reply answer={live} text={live.text} />
          </li>
        )}
      </ol>
      <ErrorNote error={error} />
      <form className="inputbox" onSubmit={send}>
        <label className="grow">
          Message <input value={input} onChange={(e) => setInput(e.target.value)} disabled={live !== null} />
        </label>
        <button type="submit" disabled={!input.trim() || live !== null || !model}>
          Send
        </button>
        {live && (
          <button type="button" onClick={() => abort.current?.abort()}>
            Stop
          </button>
        )}
      </form>
    </section>
  );
}

function Reply({ answer, text }: { answer?: ChatAnswer; text: string }) {
  return (
    <>
      {answer && (answer.provider || answer.fallbacks.length > 0) && (
        <div className="t-muted" data-testid="chosen">
          {answer.fallbacks.map((f, i) => (
            <span key={i}>
              ✗ {f.provider}/{f.model} ({f.code}){' '}
            </span>
          ))}
          {answer.provider && `→ ${answer.provider}/${answer.model}`}
          {answer.usage && ` · ${answer.usage.prompt_tokens ?? 0} in / ${answer.usage.completion_tokens ?? 0} out`}
        </div>
      )}
      <div>{text}</div>
      {answer?.toolCalls.map((c) => (
        <div key={c.id} className="t-muted">
          ⚙ {c.name}({c.input})
        </div>
      ))}
      {answer?.error && <div className="t-bad">{answer.error}</div>}
    </>
  );
}
