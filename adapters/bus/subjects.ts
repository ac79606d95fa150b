/**
 * Subject naming for events on the bus: `<prefix>.events.<EventType>`. Consumers filter with
 * `<prefix>.events.>` (everything) or the subject of one type.
 */
export const DEFAULT_SUBJECT_PREFIX = 'sig';

const TOKEN = /^[A-Za-z0-9_-]+$/;

/** A subject prefix is one or more dot-separated tokens without wildcards or whitespace. */
export function assertSubjectPrefix(prefix: string): void {
  if (!prefix.split('.').every((token) => TOKEN.test(token))) {
    throw new Error(`invalid subject prefix "${prefix}": dot-separated tokens of [A-Za-z0-9_-]`);
  }
}

/**
 * Event types are catalog names (PascalCase), but the envelope allows any string; characters that
 * would split or widen a subject (`.`, `*`, `>`, whitespace) are replaced so one type always maps
 * to one single-token subject.
 */
function eventTypeToken(type: string): string {
  return type.replace(/[^A-Za-z0-9_-]/g, '_');
}

export function eventSubject(type: string, prefix: string = DEFAULT_SUBJECT_PREFIX): string {
  return `${prefix}.events.${eventTypeToken(type)}`;
}

export function allEventsFilter(prefix: string = DEFAULT_SUBJECT_PREFIX): string {
  return `${prefix}.events.>`;
}

/** Everything the bus stream for this prefix captures. */
export function streamSubjects(prefix: string = DEFAULT_SUBJECT_PREFIX): string {
  return `${prefix}.>`;
}

/** NATS wildcard matching: `*` matches one token, a trailing `>` matches one or more. */
export function subjectMatches(filter: string, subject: string): boolean {
  // A filter without wildcards (each consumer of one event type) is the subject itself: no split
  // of either per message and durable (the in-process bus asks once per message for each).
  if (!filter.includes('*') && !filter.includes('>')) return filter === subject;
  const f = filter.split('.');
  const s = subject.split('.');
  for (let i = 0; i < f.length; i++) {
    const token = f[i];
    if (token === '>') return i === f.length - 1 && s.length > i;
    if (i >= s.length) return false;
    if (token !== '*' && token !== s[i]) return false;
  }
  return f.length === s.length;
}
