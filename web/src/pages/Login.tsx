import { useState, type FormEvent } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { ApiError, login } from '../api';

/** Paste a `wft_` token; the gateway answers with a session cookie and the token is dropped. */
export function Login() {
  const client = useQueryClient();
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    const t = token.trim();
    if (!t.startsWith('wft_')) {
      setError('A weft token starts with wft_. `weft token create` mints one.');
      return;
    }
    setBusy(true);
    try {
      const session = await login(t);
      setToken('');
      client.setQueryData(['session'], session);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="login">
      <h1>weft</h1>
      <form onSubmit={submit}>
        <label htmlFor="token">API token</label>
        <input
          id="token"
          type="password"
          autoComplete="off"
          spellCheck={false}
          placeholder="wft_…"
          value={token}
          onChange={(e) => setToken(e.target.value)}
          aria-invalid={error !== null}
          aria-describedby={error ? 'token-error' : undefined}
        />
        {error && (
          <p id="token-error" className="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy || token.trim() === ''}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <p className="hint">
          The token is exchanged for a session cookie and not kept by this page. `up.sh` prints
          where the admin token is.
        </p>
      </form>
    </main>
  );
}
