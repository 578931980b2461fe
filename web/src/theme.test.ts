import { afterEach, describe, expect, it } from 'vitest';
import { applyStoredTheme, resolveTheme, storedChoice } from './theme';

describe('theme', () => {
  afterEach(() => window.localStorage.clear());

  it('follows the system until a choice is made', () => {
    expect(resolveTheme('system', true)).toBe('dark');
    expect(resolveTheme('system', false)).toBe('light');
    expect(resolveTheme('light', true)).toBe('light');
    expect(resolveTheme('dark', false)).toBe('dark');
  });

  it('reads only an explicit choice, and drops what the first UI wrote on every load', () => {
    expect(storedChoice()).toBe('system');
    window.localStorage.setItem('weft-theme', 'dark');
    applyStoredTheme();
    expect(window.localStorage.getItem('weft-theme')).toBeNull();
    expect(document.documentElement.dataset.themeChoice).toBe('system');
    window.localStorage.setItem('weft-theme-choice', 'dark');
    expect(storedChoice()).toBe('dark');
    window.localStorage.setItem('weft-theme-choice', 'purple');
    expect(storedChoice()).toBe('system');
  });
});
