import type { FastifyPluginAsync } from 'fastify';
import type { Projection } from '../projections/projection.ts';
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

/**
 * The one module shape every feature slice exports. The service starts the slices a role asks
 * for, registers their routes on the api role, adds their checks to /readyz and stops them in
 * reverse: it knows nothing else about a feature.
 */
export interface Slice extends Component {
  /** The roles the slice does something in; a process running none of them never builds it. */
  readonly roles: readonly Role[];
  /** Its HTTP routes, registered on the api role. */
  readonly plugin?: FastifyPluginAsync;
  /** The projections it keeps (its runners start and stop with it). */
  readonly projections?: readonly Projection<unknown>[];
  /** The processors it runs in the background: what reacts to the log or the clock. */
  readonly processors?: readonly { readonly name: string }[];
  checks(): Record<string, () => Promise<CheckResult>>;
  /** The work it does once started (a first round of verdicts): resolves when that is done. */
  startUpWork?(): Promise<unknown>;
}
