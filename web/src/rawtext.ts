import YAML from 'yaml';
import { canonical, sortKeys } from './diff';

/** The raw views of a definition's content. */
export type RawFormat = 'json' | 'yaml';

/** `content` as text in `fmt`, keys sorted. */
export function toText(content: unknown, fmt: RawFormat): string {
  return fmt === 'json' ? canonical(content) : YAML.stringify(sortKeys(content));
}

/** The content a text in `fmt` holds; throws with the parser's message when it does not parse
 * or is not an object (a definition is an object of fields). */
export function fromText(text: string, fmt: RawFormat): Record<string, unknown> {
  const v: unknown = fmt === 'json' ? JSON.parse(text) : YAML.parse(text);
  if (!v || typeof v !== 'object' || Array.isArray(v)) {
    throw new Error(`the ${fmt.toUpperCase()} must be an object of fields`);
  }
  return v as Record<string, unknown>;
}
