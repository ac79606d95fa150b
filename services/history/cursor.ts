/**
 * The resume cursor: a log position plus the first characters of the id of the event at that
 * position. Opaque to callers; the id tag lets the service refuse a cursor issued by another
 * store (whose position N holds some other event) instead of silently skipping rows.
 */
const PREFIX = 'h1';
const TAG_LENGTH = 12;

export interface Cursor {
  position: number;
  tag: string;
}

export function encodeCursor(position: number, eventId: string | null): string {
  const tag = eventId ? eventId.replaceAll('-', '').slice(0, TAG_LENGTH) : '';
  return Buffer.from(`${PREFIX}:${position}:${tag}`).toString('base64url');
}

/** Null when the text is not a cursor at all. */
export function decodeCursor(text: string): Cursor | null {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(text)) return null;
  const m = /^h1:(\d{1,15}):([0-9a-f]{0,12})$/.exec(Buffer.from(text, 'base64url').toString('utf8'));
  if (!m) return null;
  const position = Number(m[1]);
  const tag = m[2]!;
  if ((position === 0) !== (tag === '')) return null;
  return { position, tag };
}

export function tagMatches(cursor: Cursor, eventId: string): boolean {
  return eventId.replaceAll('-', '').startsWith(cursor.tag) && cursor.tag.length === TAG_LENGTH;
}
