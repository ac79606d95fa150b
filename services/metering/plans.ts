import type { Config } from '../../contracts/config.ts';
import type { Plan } from '../../contracts/events.ts';

export interface PlanLimits {
  /** Calls per UTC month. */
  monthly: number;
  /** Calls per UTC day, or null when only the month counts. */
  daily: number | null;
}

export type PlanTable = Record<Plan, PlanLimits>;

/** Limits are configuration; every plan covers all assets and all eleven timeframes. */
export function planTable(config: Pick<Config, Extract<keyof Config, `PLAN_${string}`>>): PlanTable {
  return {
    free: { monthly: config.PLAN_FREE_MONTHLY_CALLS, daily: config.PLAN_FREE_DAILY_CALLS },
    starter: { monthly: config.PLAN_STARTER_MONTHLY_CALLS, daily: null },
    pro: { monthly: config.PLAN_PRO_MONTHLY_CALLS, daily: null },
  };
}
