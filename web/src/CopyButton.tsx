import { useState } from 'react';

/** Copies `text` to the clipboard, saying whether it did (the clipboard needs a secure
 * context: https or localhost). */
export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState<'copied' | 'failed' | null>(null);
  const copy = async () => {
    try {
      if (!navigator.clipboard) throw new Error('no clipboard');
      await navigator.clipboard.writeText(text);
      setDone('copied');
    } catch {
      setDone('failed');
    }
    window.setTimeout(() => setDone(null), 2000);
  };
  return (
    <button type="button" onClick={copy} aria-label={label}>
      {done === 'copied' ? 'Copied' : done === 'failed' ? 'Copy it by hand' : 'Copy'}
    </button>
  );
}
