import { useQuery, useQueryClient } from '@tanstack/react-query';
import { NavLink, Navigate, Route, Routes } from 'react-router';
import { can, currentSession, logout, type Session } from './api';
import { ChannelsPage } from './pages/Channels';
import { SchedulesPage, WebhooksPage } from './pages/Ingress';
import { FilesPage } from './pages/Files';
import { DefinitionPage, LibraryPage } from './pages/Library';
import { Login } from './pages/Login';
import { MemoryPage } from './pages/Memory';
import { OperationsPage } from './pages/Operations';
import { PlaygroundPage } from './pages/Playground';
import { RunPage } from './pages/Run';
import { RunsPage } from './pages/Runs';
import { TokensPage } from './pages/Tokens';
import { UsagePage } from './pages/Usage';
import { THEME_CHOICES, useTheme, type ThemeChoice } from './theme';

export function App() {
  const session = useQuery({ queryKey: ['session'], queryFn: currentSession });
  // Here rather than in the shell, so the sign-in page follows the theme too.
  const theme = useTheme();
  if (session.isPending) {
    return <p className="centered">Loading…</p>;
  }
  if (session.isError) {
    return (
      <p className="centered error" role="alert">
        The gateway did not answer: {String(session.error.message)}. Reload once it is up.
      </p>
    );
  }
  if (!session.data) {
    return <Login />;
  }
  return <Shell session={session.data} theme={theme} />;
}

function Shell({ session, theme }: { session: Session; theme: ReturnType<typeof useTheme> }) {
  const client = useQueryClient();
  const signOut = async () => {
    await logout();
    // Transcripts kept for re-attaching after a reload belong to this session.
    window.sessionStorage.clear();
    // Drop every cached answer of this session; the session query itself is set (not removed),
    // so the mounted app sees it change and shows the sign-in page.
    client.setQueryData(['session'], null);
    client.removeQueries({ predicate: (q) => q.queryKey[0] !== 'session' });
  };
  return (
    <div className="shell">
      <header className="topbar">
        <span className="brand">weft</span>
        <nav aria-label="Main">
          {(can(session, 'runs:read') || can(session, 'runs:create')) && (
            <NavLink to="/runs">Runs</NavLink>
          )}
          {(can(session, 'runs:read') || can(session, 'runs:create')) && (
            <NavLink to="/library">Library</NavLink>
          )}
          {can(session, 'memory:read') && <NavLink to="/memory">Memory</NavLink>}
          {can(session, 'volumes:read') && <NavLink to="/files">Files</NavLink>}
          {(can(session, 'channels:read') || can(session, 'channels:publish')) && (
            <NavLink to="/channels">Channels</NavLink>
          )}
          {can(session, 'tenant:admin') && <NavLink to="/schedules">Schedules</NavLink>}
          {can(session, 'tenant:admin') && <NavLink to="/webhooks">Webhooks</NavLink>}
          {can(session, 'tenant:admin') && <NavLink to="/tokens">Tokens</NavLink>}
          {can(session, 'tenant:admin') && <NavLink to="/usage">Usage</NavLink>}
          {can(session, 'tenant:admin') && <NavLink to="/operations">Operations</NavLink>}
          {can(session, 'llm:call') && <NavLink to="/playground">Playground</NavLink>}
        </nav>
        <span className="who" title={session.scopes.join(' ')}>
          {session.subject} · {session.tenant}
        </span>
        <label className="theme">
          Theme{' '}
          <select value={theme.choice} onChange={(e) => theme.choose(e.target.value as ThemeChoice)}>
            {THEME_CHOICES.map((c) => (
              <option key={c} value={c}>
                {c === 'system' && theme.choice === 'system' ? `system (${theme.theme})` : c}
              </option>
            ))}
          </select>
        </label>
        <button type="button" onClick={signOut}>
          Log out
        </button>
      </header>
      <main>
        <Routes>
          <Route path="/" element={<Navigate to="/runs" replace />} />
          <Route path="/runs" element={<RunsPage />} />
          <Route path="/runs/:id" element={<RunPage />} />
          <Route path="/library" element={<Navigate to="/library/agents" replace />} />
          <Route path="/library/:kind" element={<LibraryPage session={session} />} />
          <Route path="/library/:kind/:name" element={<DefinitionPage session={session} />} />
          <Route path="/memory" element={<MemoryPage session={session} />} />
          <Route path="/files" element={<FilesPage session={session} />} />
          <Route path="/files/:name" element={<FilesPage session={session} />} />
          <Route path="/channels" element={<ChannelsPage />} />
          <Route path="/schedules" element={<SchedulesPage />} />
          <Route path="/webhooks" element={<WebhooksPage session={session} />} />
          <Route path="/tokens" element={<TokensPage session={session} />} />
          <Route path="/usage" element={<UsagePage />} />
          <Route path="/operations" element={<OperationsPage session={session} />} />
          <Route path="/playground" element={<PlaygroundPage />} />
          <Route
            path="*"
            element={<p className="empty">No such page. Pick one from the bar above.</p>}
          />
        </Routes>
      </main>
    </div>
  );
}
