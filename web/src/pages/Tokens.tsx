import { useState, type FormEvent } from 'react';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { api, can, ok, type Scope, type Session } from '../api';
import { ErrorNote } from '../ErrorNote';

const ALL_SCOPES: Scope[] = [
  'tenant:admin',
  'runs:create',
  'runs:read',
  'memory:read',
  'memory:write',
  'channels:publish',
  'channels:read',
  'llm:call',
];

/** The scopes this principal may grant: never more than it holds. */
export function grantable(session: Session): Scope[] {
  return [...(can(session, 'admin') ? (['admin'] as Scope[]) : []), ...ALL_SCOPES.filter((s) => can(session, s))];
}

export function TokensPage({ session }: { session: Session }) {
  const client = useQueryClient();
  const tokens = useQuery({ queryKey: ['tokens'], queryFn: () => ok(api.GET('/v1/tokens')) });
  const revoke = useMutation({
    mutationFn: (id: string) => ok(api.DELETE('/v1/tokens/{id}', { params: { path: { id } } })),
    onSuccess: () => client.invalidateQueries({ queryKey: ['tokens'] }),
  });
  const rows = tokens.data?.data ?? [];
  return (
    <section>
      <h1>Tokens</h1>
      <MintForm session={session} />
      <ErrorNote error={tokens.error} />
      <ErrorNote error={revoke.error} />
      {tokens.isSuccess && rows.length === 0 && <p className="empty">No tokens you may see yet. Mint one above.</p>}
      {rows.length > 0 && (
        <div className="scroll">
          <table className="grid">
            <thead>
              <tr>
                <th>Name</th>
                <th>Tenant</th>
                <th>Subject</th>
                <th>Scopes</th>
                <th>Prefix</th>
                <th>Created</th>
                <th>State</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {rows.map((t) => (
                <tr key={t.id}>
                  <td>{t.name}</td>
                  <td>{t.tenant}</td>
                  <td>{t.subject}</td>
                  <td>{t.scopes.join(' ')}</td>
                  <td>
                    <code>{t.prefix}…</code>
                  </td>
                  <td>{new Date(t.created_at).toLocaleString()}</td>
                  <td>{t.revoked_at ? 'revoked' : t.expires_at && new Date(t.expires_at) < new Date() ? 'expired' : 'active'}</td>
                  <td>
                    {!t.revoked_at && (
                      <button
                        type="button"
                        aria-label={`Revoke ${t.name}`}
                        onClick={() => {
                          if (window.confirm(`Revoke “${t.name}”? Every call and UI session using it stops at once.`)) {
                            revoke.mutate(t.id);
                          }
                        }}
                      >
                        Revoke
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function MintForm({ session }: { session: Session }) {
  const client = useQueryClient();
  const [name, setName] = useState('');
  const [subject, setSubject] = useState('');
  const [tenant, setTenant] = useState('');
  const [scopes, setScopes] = useState<Scope[]>([]);
  const [expires, setExpires] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const isAdmin = can(session, 'admin');

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    setSecret(null);
    try {
      const minted = await ok(
        api.POST('/v1/tokens', {
          body: {
            name,
            subject,
            scopes,
            ...(isAdmin && tenant ? { tenant } : {}),
            ...(expires ? { expires_at: new Date(expires).toISOString() } : {}),
          },
        }),
      );
      // Only a mint's answer carries the secret (`token`), once.
      if (!minted.token) throw new Error('the gateway answered without the new token');
      setSecret(minted.token);
      setName('');
      setSubject('');
      setScopes([]);
      await client.invalidateQueries({ queryKey: ['tokens'] });
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  const toggle = (s: Scope) => setScopes((cur) => (cur.includes(s) ? cur.filter((x) => x !== s) : [...cur, s]));

  return (
    <form className="panel" onSubmit={submit} aria-label="Mint a token">
      <h2>Mint a token</h2>
      <div className="row">
        <label>
          Name <input value={name} onChange={(e) => setName(e.target.value)} required maxLength={200} />
        </label>
        <label>
          Subject <input value={subject} onChange={(e) => setSubject(e.target.value)} required />
        </label>
        {isAdmin && (
          <label>
            Tenant <input value={tenant} onChange={(e) => setTenant(e.target.value)} placeholder={session.tenant} />
          </label>
        )}
        <label>
          Expires <input type="datetime-local" value={expires} onChange={(e) => setExpires(e.target.value)} />
        </label>
      </div>
      <fieldset>
        <legend>Scopes</legend>
        {grantable(session).map((s) => (
          <label key={s} className="check">
            <input type="checkbox" checked={scopes.includes(s)} onChange={() => toggle(s)} /> {s}
          </label>
        ))}
      </fieldset>
      <button type="submit" disabled={!name || !subject || scopes.length === 0}>
        Mint
      </button>
      <ErrorNote error={error} />
      {secret && (
        <div className="secret" role="status">
          <p>The new token, shown once — copy it now:</p>
          <code data-testid="minted-token">{secret}</code>{' '}
          <button type="button" onClick={() => navigator.clipboard?.writeText(secret)}>
            Copy
          </button>{' '}
          <button type="button" onClick={() => setSecret(null)}>
            Done
          </button>
        </div>
      )}
    </form>
  );
}
