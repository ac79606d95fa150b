import type { CheckResult } from './shared/readiness.ts';

/** A long-running part of a role: started in order, stopped in reverse on shutdown. */
export interface Component {
  readonly name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Named readiness checks this component contributes to /readyz. */
  checks?(): Record<string, () => Promise<CheckResult>>;
}

export const ROLES = ['api', 'engine', 'projections', 'dispatcher'] as const;
export type Role = (typeof ROLES)[number];
