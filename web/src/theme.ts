// The colour theme: the system's (`prefers-color-scheme`, followed live when it changes) until
// the user picks light or dark; the pick is kept in localStorage (a preference, never a
// credential), and picking "system" again drops it.
import { useEffect, useState } from 'react';

export type Theme = 'light' | 'dark';
export type ThemeChoice = 'system' | Theme;

export const THEME_CHOICES: ThemeChoice[] = ['system', 'light', 'dark'];

const KEY = 'weft-theme-choice';
// The first UI wrote the theme it showed under this key on every load, so a value there is not
// a choice the user made: it is dropped, and the system's theme followed again.
const OLD_KEY = 'weft-theme';

const darkQuery = (): MediaQueryList | undefined => window.matchMedia?.('(prefers-color-scheme: dark)');

function storage(): Storage | null {
  try {
    return window.localStorage;
  } catch {
    return null; // storage disabled: the choice lasts for this page only
  }
}

/** The user's explicit choice, or 'system'. */
export function storedChoice(): ThemeChoice {
  const saved = storage()?.getItem(KEY);
  return saved === 'light' || saved === 'dark' ? saved : 'system';
}

/** The theme a choice shows, given whether the system prefers dark. */
export function resolveTheme(choice: ThemeChoice, systemDark: boolean): Theme {
  return choice === 'system' ? (systemDark ? 'dark' : 'light') : choice;
}

function applyTheme(theme: Theme, choice: ThemeChoice) {
  const root = document.documentElement;
  root.dataset.theme = theme;
  root.dataset.themeChoice = choice;
}

/** Sets the theme before the first render (no flash of the other theme). */
export function applyStoredTheme() {
  storage()?.removeItem(OLD_KEY);
  const choice = storedChoice();
  applyTheme(resolveTheme(choice, darkQuery()?.matches ?? false), choice);
}

/** The theme shown, the choice behind it, and a way to change the choice. */
export function useTheme(): { theme: Theme; choice: ThemeChoice; choose: (c: ThemeChoice) => void } {
  const [choice, setChoice] = useState<ThemeChoice>(storedChoice);
  const [systemDark, setSystemDark] = useState(() => darkQuery()?.matches ?? false);
  useEffect(() => {
    const mq = darkQuery();
    if (!mq) return;
    const changed = (e: MediaQueryListEvent) => setSystemDark(e.matches);
    setSystemDark(mq.matches);
    mq.addEventListener('change', changed);
    return () => mq.removeEventListener('change', changed);
  }, []);
  useEffect(() => {
    // A choice made in another tab applies here too.
    const changed = (e: StorageEvent) => {
      if (e.key === KEY || e.key === null) setChoice(storedChoice());
    };
    window.addEventListener('storage', changed);
    return () => window.removeEventListener('storage', changed);
  }, []);
  const theme = resolveTheme(choice, systemDark);
  useEffect(() => applyTheme(theme, choice), [theme, choice]);
  const choose = (c: ThemeChoice) => {
    try {
      if (c === 'system') storage()?.removeItem(KEY);
      else storage()?.setItem(KEY, c);
    } catch {
      /* over the quota: the choice lasts for this page only */
    }
    setChoice(c);
  };
  return { theme, choice, choose };
}
