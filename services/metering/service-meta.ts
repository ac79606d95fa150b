import { z } from 'zod';
import { Plan } from '../../contracts/events.ts';
import { ChatQuotaSnapshot } from '../../contracts/knowledge.ts';
import { QuotaSnapshot } from './snapshot.ts';

/**
 * The `_service` block every response carries (field names follow the public peer). Auth outcome: ABSENT
 * (no Authorization), MALFORMED (not `Bearer <key>`), UNKNOWN (not issued, or revoked), INDETERMINATE, OK.
 */
export const AuthBlock = z.object({
  outcome: z.enum(['ABSENT', 'MALFORMED', 'UNKNOWN', 'INDETERMINATE', 'OK']),
  /** Whether the request carried anything that looks like a credential. */
  presented: z.boolean(),
  /**
   * The tier applied; `free` with a key presented means the key was not applied. A refused key
   * (UNKNOWN, INDETERMINATE) carries `free`: its request counts as its address's anonymous caller.
   */
  tier: Plan,
  /** What to change when a presented credential was not applied. */
  detail: z.string().optional(),
});
export type AuthBlock = z.infer<typeof AuthBlock>;

export const ServiceMeta = z.object({
  auth: AuthBlock,
  /** Live figures after this call's debit; null when they could not be read. */
  quota: QuotaSnapshot.nullable(),
});
export type ServiceMeta = z.infer<typeof ServiceMeta>;

/** A paid call's receipt: `pending` until the settlement is confirmed, `transaction` null until known. */
export const PaymentReceipt = z.object({
  status: z.enum(['settled', 'pending']),
  network: z.string(),
  asset: z.string(),
  amount: z.string(),
  payer: z.string(),
  transaction: z.string().nullable(),
});
export type PaymentReceipt = z.infer<typeof PaymentReceipt>;

/** `_service` of a call paid per call (x402): the same block with the receipt alongside. */
export const PaidServiceMeta = ServiceMeta.extend({ payment: PaymentReceipt });
export type PaidServiceMeta = z.infer<typeof PaidServiceMeta>;

/**
 * `_service` as an answer may carry it, on every channel (the OpenAPI document, the MCP tools'
 * outputSchema): who called, what is left of their quota, a paid call's receipt, and on the chat
 * its own quota.
 */
export const ServiceBlock = ServiceMeta.extend({
  payment: PaymentReceipt.optional(),
  chat_quota: ChatQuotaSnapshot.optional(),
}).describe(
  'Caller (auth), quota after this call, a paid call’s receipt (payment), and on /api/chat its own quota (chat_quota)',
);
