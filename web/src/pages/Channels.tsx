import { useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, ok, type Schemas } from '../api';
import { ErrorNote } from '../ErrorNote';
import type { paths } from '../openapi';

type Channel = Schemas['Channel'];
type PeekQuery = NonNullable<paths['/v1/channels/{name}/peek']['get']['parameters']['query']>;

export function ChannelsPage() {
  const list = useQuery({ queryKey: ['channels'], queryFn: () => ok(api.GET('/v1/channels')) });
  const [open, setOpen] = useState<string | null>(null);
  const rows = list.data?.data ?? [];
  const chosen = rows.find((c) => c.name === open);
  return (
    <section>
      <h1>Channels</h1>
      <ErrorNote error={list.error} />
      {list.isSuccess && rows.length === 0 && (
        <p className="empty">No channels in this tenant. Create one with PUT /v1/channels/&lt;name&gt; (docs/api.md).</p>
      )}
      {rows.length > 0 && (
        <div className="scroll">
          <table className="grid" aria-label="Channels">
            <thead>
              <tr>
                <th>Name</th>
                <th>Scope</th>
                <th>Keeps</th>
                <th>Message TTL</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((c) => (
                <tr key={c.name}>
                  <td>
                    <button type="button" className="link" onClick={() => setOpen(c.name)}>
                      {c.name}
                    </button>
                  </td>
                  <td>{c.scope}</td>
                  <td>{c.max_messages} messages</td>
                  <td>{Math.round(c.ttl_seconds / 3600)} h</td>
                  <td>{new Date(c.updated_at).toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {chosen && <Peek key={chosen.name} channel={chosen} />}
    </section>
  );
}

function Peek({ channel }: { channel: Channel }) {
  const [stream, setStream] = useState('');
  const needs = channel.scope === 'agent' ? 'agent' : channel.scope === 'user' ? 'user' : null;
  const peek = useQuery({
    queryKey: ['peek', channel.name, stream],
    enabled: channel.scope !== 'agent' || stream !== '',
    refetchInterval: 3000,
    queryFn: () => {
      const query: PeekQuery = { max: 20 };
      if (needs && stream) query[needs] = stream;
      return ok(api.GET('/v1/channels/{name}/peek', { params: { path: { name: channel.name }, query } }));
    },
  });
  const msgs = peek.data?.data ?? [];
  const newest = msgs[msgs.length - 1];
  return (
    <div className="panel" aria-label={`Peek ${channel.name}`}>
      <h2>
        <code>{channel.name}</code>
      </h2>
      {needs && (
        <label>
          {needs === 'agent' ? 'Agent' : 'User (empty: yours)'} <input value={stream} onChange={(e) => setStream(e.target.value.trim())} />
        </label>
      )}
      {channel.scope === 'agent' && stream === '' && <p className="empty">Name the agent whose stream to peek.</p>}
      <ErrorNote error={peek.error} />
      {peek.isSuccess && (
        <p data-testid="channel-stats">
          {msgs.length === 0
            ? 'No live messages in this stream.'
            : `Newest seq ${newest.seq}, published ${new Date(newest.published_at).toLocaleString()}; showing the last ${msgs.length}.`}
        </p>
      )}
      {msgs.length > 0 && (
        <div className="scroll">
          <table className="grid" aria-label="Newest messages">
            <thead>
              <tr>
                <th>Seq</th>
                <th>Published</th>
                <th>By</th>
                <th>Payload</th>
              </tr>
            </thead>
            <tbody>
              {msgs.map((m) => (
                <tr key={m.cursor}>
                  <td>{m.seq}</td>
                  <td>{new Date(m.published_at).toLocaleString()}</td>
                  <td>{m.published_by}</td>
                  <td>
                    <code>{JSON.stringify(m.payload)}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
