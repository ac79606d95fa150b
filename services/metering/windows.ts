import type { QuotaWindow } from '../../adapters/cache/port.ts';
import type { Plan } from '../../contracts/events.ts';
import { setBounded } from '../shared/bounded-map.ts';
import type { PlanLimits, PlanTable } from './plans.ts';

/** Whose calls are counted: a key (by hash) or an anonymous client (by hashed address). */
export interface QuotaSubject {
  id: string;
  kind: 'key' | 'anonymous';
  plan: Plan;
}

/** Quota windows are the UTC calendar day and month; callers pass the clock reading. */
export interface QuotaPeriod {
  day: string;
  month: string;
  /** Unix ms at which the day / month window starts afresh, and as ISO times (the figures' `resets_at`). */
  dayResetsAt: number;
  monthResetsAt: number;
  dayResetsAtIso: string;
  monthResetsAtIso: string;
}

/** Counters outlive their window by this much, so a clock slightly behind still finds them. */
const EXPIRY_GRACE_MS = 60 * 60_000;
/** A UTC day: no leap seconds in Unix time, so every day is this long. */
const DAY_MS = 86_400_000;

/** The period of the last day asked about, shared (frozen) by the day's calls: building one showed in profiles. */
let lastPeriod: QuotaPeriod | null = null;

export function quotaPeriod(now: number): QuotaPeriod {
  const last = lastPeriod;
  if (last !== null && now < last.dayResetsAt && now >= last.dayResetsAt - DAY_MS) return last;
  const iso = new Date(now).toISOString();
  const day = iso.slice(0, 10);
  const month = iso.slice(0, 7);
  const dayResetsAt = resetsAtOf(day);
  const monthResetsAt = resetsAtOf(month);
  const dayResetsAtIso = new Date(dayResetsAt).toISOString();
  const monthResetsAtIso = new Date(monthResetsAt).toISOString();
  lastPeriod = Object.freeze({ day, month, dayResetsAt, monthResetsAt, dayResetsAtIso, monthResetsAtIso });
  return lastPeriod;
}

/** End of the window a day (YYYY-MM-DD) or month (YYYY-MM) label names, from the label alone (the only reckoning of one). */
export function resetsAtOf(label: string): number {
  let at = resetsAtCache.get(label);
  if (at === undefined) {
    const [y, m, d] = label.split('-').map(Number) as [number, number, number | undefined];
    at = d === undefined ? Date.UTC(y, m, 1) : Date.UTC(y, m - 1, d + 1);
    setBounded(resetsAtCache, label, at, 4096);
  }
  return at;
}
const resetsAtCache = new Map<string, number>();

export function monthKey(subject: string, month: string): string {
  return `quota:${subject}:m:${month}`;
}

export function dayKey(subject: string, day: string): string {
  return `quota:${subject}:d:${day}`;
}

/** The monthly chat counter (the knowledge chat quota), kept in the quota's generations too. */
export function chatKey(subject: string, month: string): string {
  return `chat:${subject}:m:${month}`;
}

export function counterExpiry(resetsAt: number): number {
  return resetsAt + EXPIRY_GRACE_MS;
}

/** Month, then day: the day is counted on every plan, so a rebuild from the log needs no plan history. */
export function quotaWindows(subject: string, limits: PlanLimits, period: QuotaPeriod): QuotaWindow[] {
  return [
    {
      key: monthKey(subject, period.month),
      limit: limits.monthly,
      expiresAt: counterExpiry(period.monthResetsAt),
    },
    {
      key: dayKey(subject, period.day),
      limit: limits.daily ?? Number.MAX_SAFE_INTEGER,
      expiresAt: counterExpiry(period.dayResetsAt),
    },
  ];
}

/** A subject's windows and their keys on one day and plan. */
export interface SubjectWindows {
  subject: QuotaSubject;
  period: QuotaPeriod;
  limits: PlanLimits;
  windows: QuotaWindow[];
  keys: string[];
}

const windowsBySubject = new Map<string, SubjectWindows>();
/** Memos keyed by subject hold at most this many (a flood of callers costs a recompute, not memory). */
export const REMEMBERED_SUBJECTS = 10_000;

/** A subject's windows at `now`, made once a day and plan, shared (frozen): fresh keys showed in profiles. */
export function subjectWindows(subject: QuotaSubject, plans: PlanTable, now: number): SubjectWindows {
  const period = quotaPeriod(now);
  const limits = plans[subject.plan];
  const known = windowsBySubject.get(subject.id);
  if (known?.period === period && known.limits === limits && known.subject.plan === subject.plan)
    return known;
  // Frozen, so no call changes what the next reads; typed mutable for the cache port.
  const windows = Object.freeze(quotaWindows(subject.id, limits, period).map((w) => Object.freeze(w)));
  const keys = Object.freeze(windows.map((w) => w.key)) as string[];
  const made = { subject, period, limits, windows: windows as QuotaWindow[], keys };
  setBounded(windowsBySubject, subject.id, made, REMEMBERED_SUBJECTS);
  return made;
}
