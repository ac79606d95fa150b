import { z } from 'zod';

/**
 * A tool's input, refusing a key it does not know with the keys it does: zod alone says
 * `Unrecognized key: "riskBudget"`, and a caller who misspelt an argument (riskBudget for
 * riskBudgetUsd) had to find the name in the schema. Read from the schema raising the issue, so
 * an input extended from another (`.extend`, which keeps this error) lists its own keys.
 */
export function strictInput<Shape extends z.ZodRawShape>(shape: Shape) {
  return z.strictObject(shape, { error: unknownKeys });
}

function unknownKeys(issue: z.core.$ZodRawIssue): string | undefined {
  if (issue.code !== 'unrecognized_keys') return undefined;
  const known = issue.inst instanceof z.ZodObject ? issue.inst.shape : undefined;
  if (known === undefined) return undefined;
  const keys = issue.keys as string[];
  const accepted = Object.keys(known);
  return `unknown key${keys.length === 1 ? '' : 's'} ${keys.map((k) => JSON.stringify(k)).join(', ')}; accepted: ${accepted.length > 0 ? accepted.join(', ') : 'none'}`;
}
